package sandbox

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// nobodyID is used when there is no "nobody" in the user database.
const nobodyID = 65534

// User is who a sandboxed command runs as.
type User struct {
	UID, GID uint32
	Name     string // from the user database; "" when it has no entry
	Home     string // likewise
	Source   string // how it was chosen, for the log: "SUDO_UID", "nobody", or what the caller sets
}

func (u User) String() string {
	s := fmt.Sprintf("%d:%d", u.UID, u.GID)
	if u.Name != "" {
		s += " (" + u.Name + ")"
	}
	return s
}

// DefaultUser is the user a command runs as unless told otherwise: the
// user behind sudo (SUDO_UID, SUDO_GID), else nobody. Never root: a
// SUDO_UID of 0 counts as no SUDO_UID.
func DefaultUser(getenv func(string) string) (User, error) {
	if s := getenv("SUDO_UID"); s != "" && s != "0" {
		uid, err := parseID(s)
		if err != nil {
			return User{}, fmt.Errorf("SUDO_UID: %w", err)
		}
		u := lookupUID(uid)
		if g := getenv("SUDO_GID"); g != "" {
			if u.GID, err = parseID(g); err != nil {
				return User{}, fmt.Errorf("SUDO_GID: %w", err)
			}
		}
		u.Source = "SUDO_UID"
		return u, nil
	}
	u := User{UID: nobodyID, GID: nobodyID}
	if pw, err := user.Lookup("nobody"); err == nil {
		if uid, err := parseID(pw.Uid); err == nil {
			u = lookupUID(uid)
		}
	}
	u.Source = "nobody"
	return u, nil
}

// ParseUser parses UID[:GID], each a number or a name. Without GID, the
// user's primary group, or GID = UID for a number not in the database.
func ParseUser(s string) (User, error) {
	us, gs, hasGID := strings.Cut(s, ":")
	var u User
	if uid, err := parseID(us); err == nil {
		u = lookupUID(uid)
	} else {
		pw, lerr := user.Lookup(us)
		if lerr != nil {
			return u, fmt.Errorf("no such user %q (want UID[:GID])", us)
		}
		uid, err := parseID(pw.Uid)
		if err != nil {
			return u, err
		}
		u = lookupUID(uid)
	}
	if !hasGID {
		return u, nil
	}
	if gid, err := parseID(gs); err == nil {
		u.GID = gid
		return u, nil
	}
	gr, err := user.LookupGroup(gs)
	if err != nil {
		return u, fmt.Errorf("no such group %q (want UID[:GID])", gs)
	}
	gid, err := parseID(gr.Gid)
	if err != nil {
		return u, err
	}
	u.GID = gid
	return u, nil
}

// lookupUID fills in the primary group, name and home of uid from the user
// database; a uid without an entry gets gid = uid.
func lookupUID(uid uint32) User {
	u := User{UID: uid, GID: uid}
	pw, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return u
	}
	if gid, err := parseID(pw.Gid); err == nil {
		u.GID = gid
	}
	u.Name, u.Home = pw.Username, pw.HomeDir
	return u
}

// parseID parses a numeric user or group id; 2^32-1 is (uid_t)-1, which
// the kernel takes as "unchanged".
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%q is not a numeric id", s)
	}
	return uint32(n), nil
}
