package sandbox

import (
	"strings"
	"testing"
)

// getenvOf is a getenv over the pairs k1, v1, k2, v2...
func getenvOf(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func TestDefaultUser(t *testing.T) {
	nobody, err := DefaultUser(getenvOf())
	if err != nil || nobody.Source != "nobody" || nobody.UID == 0 || nobody.GID == 0 {
		t.Fatalf("default: %+v, %v; want nobody", nobody, err)
	}
	for _, c := range []struct {
		env        []string
		uid, gid   uint32
		wantErr    string
		wantNobody bool
	}{
		{env: []string{"SUDO_UID", "1234", "SUDO_GID", "5678"}, uid: 1234, gid: 5678},
		{env: []string{"SUDO_UID", "54321"}, uid: 54321, gid: 54321},
		{env: []string{"SUDO_UID", "0", "SUDO_GID", "0"}, wantNobody: true}, // root behind sudo is no reason to run as root
		{env: []string{"SUDO_UID", "x"}, wantErr: "SUDO_UID"},
		{env: []string{"SUDO_UID", "1234", "SUDO_GID", "x"}, wantErr: "SUDO_GID"},
	} {
		u, err := DefaultUser(getenvOf(c.env...))
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("env %q: %+v, %v; want error %q", c.env, u, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("env %q: %v", c.env, err)
		case c.wantNobody:
			if u != nobody {
				t.Errorf("env %q: %+v, want nobody %+v", c.env, u, nobody)
			}
		case u.UID != c.uid || u.GID != c.gid || u.Source != "SUDO_UID":
			t.Errorf("env %q: %+v, want %d:%d from SUDO_UID", c.env, u, c.uid, c.gid)
		}
	}
}

func TestParseUser(t *testing.T) {
	for _, c := range []struct {
		in       string
		uid, gid uint32
		wantErr  string
	}{
		{in: "0", uid: 0, gid: 0},
		{in: "root", uid: 0, gid: 0},
		{in: "root:7", uid: 0, gid: 7},
		{in: "1234:99", uid: 1234, gid: 99},
		{in: "54321", uid: 54321, gid: 54321}, // not in the database: gid = uid
		{in: "hookgate-no-such-user", wantErr: `no such user "hookgate-no-such-user"`},
		{in: "1:hookgate-no-such-group", wantErr: `no such group "hookgate-no-such-group"`},
		{in: "-1", wantErr: "no such user"},
		{in: "4294967295", wantErr: "no such user"},
		{in: "", wantErr: "no such user"},
	} {
		u, err := ParseUser(c.in)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: %+v, %v; want error %q", c.in, u, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", c.in, err)
		case u.UID != c.uid || u.GID != c.gid || u.Source != "":
			t.Errorf("%q: %+v, want %d:%d", c.in, u, c.uid, c.gid)
		}
	}
}

func TestUserString(t *testing.T) {
	if got := (User{UID: 1, GID: 2, Name: "dev"}).String(); got != "1:2 (dev)" {
		t.Errorf("String = %q", got)
	}
	if got := (User{UID: 54321, GID: 54321}).String(); got != "54321:54321" {
		t.Errorf("String = %q", got)
	}
}
