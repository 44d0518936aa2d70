package allowlist

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Limits from RFC 1035 §2.3.4, applied to the ASCII (punycode) form.
const (
	maxLabelLen = 63
	maxNameLen  = 253
	// maxRawLen bounds the input we hand to the IDNA mapper. Anything longer
	// cannot become a valid name (mapping never shrinks a name by this much),
	// and refusing it early keeps hostile inputs cheap.
	maxRawLen = 1024
)

// idnaProfile is the UTS #46 lookup profile with the two relaxations browsers
// (WHATWG URL) also make, because real host names need them:
//   - CheckHyphens off: "r3---sn-abc.googlevideo.com" is in daily use.
//   - StrictDomainName off: '_' appears in real host names. This also lets
//     other ASCII punctuation through the mapper, so every result is checked
//     again by checkName, which allows only [a-z0-9_-] in labels.
//
// It is never modified after package initialisation; *idna.Profile is safe
// for concurrent use.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.CheckHyphens(false),
	idna.StrictDomainName(false),
)

// NormalizeHost returns the canonical spelling of a host as a client may
// write it, so that matching and logging compare one form only.
//
// Names are mapped through IDNA to punycode, lower-cased, and lose ONE
// trailing dot ("a.com.." is an error). Labels may hold a-z, 0-9, '-' and '_'.
//
// IP literals come back canonical (host == ip.String()) with ip valid:
//   - IPv6 with or without brackets ("[::1]", "::1"); zones are rejected.
//     IPv4-mapped IPv6 stays IPv6 ("::ffff:127.0.0.1"); callers classify
//     ip.Unmap().
//   - every IPv4 spelling inet_aton(3) accepts: "2130706433", "0177.0.0.1",
//     "0x7f.0.0.1", "127.1", "127.0.1", and mixtures.
//
// As in the WHATWG URL standard, a name whose last label is a number (all
// digits, or "0x" and hex digits) is always read as IPv4; if it is not a valid
// one ("256.0.0.1", "1.2.3.4.5", "example.123", a part that overflows) it is
// an error, never a name. That way no spelling of an address can slip past as
// a name that a resolver would later read as an address.
//
// NormalizeHost does not allocate when raw is already a canonical name.
func NormalizeHost(raw string) (host string, ip netip.Addr, err error) {
	if raw == "" {
		return "", netip.Addr{}, errors.New("empty host")
	}
	if len(raw) > maxRawLen {
		return "", netip.Addr{}, fmt.Errorf("host is %d bytes long, more than the %d a name can have", len(raw), maxNameLen)
	}

	var upper, nonASCII, v6chars bool
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c >= 0x80:
			nonASCII = true
		case c == ':', c == '[', c == ']':
			v6chars = true
		default:
			return "", netip.Addr{}, badChar(c)
		}
	}
	if v6chars {
		if nonASCII {
			return "", netip.Addr{}, errors.New(`':', '[' and ']' are only allowed in an IPv6 address`)
		}
		return normalizeIPv6(raw)
	}

	name := raw
	if nonASCII {
		if !utf8.ValidString(raw) {
			// The mapper would turn stray bytes into U+FFFD and carry on.
			return "", netip.Addr{}, errors.New("not a valid internationalised domain name: invalid UTF-8")
		}
		s, err := idnaProfile.ToASCII(raw)
		if err != nil {
			return "", netip.Addr{}, fmt.Errorf("not a valid internationalised domain name: %v", err)
		}
		// The mapper may have produced punctuation (e.g. U+FF1A FULLWIDTH
		// COLON becomes ':'); checkName below rejects everything but
		// letters, digits, '-', '_' and dots.
		name = s
	} else if upper {
		name = strings.ToLower(raw)
	}
	return normalizeName(name)
}

// normalizeName finishes a lower-case ASCII candidate: one trailing dot,
// label syntax, punycode validity, and the "ends in a number" IPv4 rule.
func normalizeName(name string) (string, netip.Addr, error) {
	name = strings.TrimSuffix(name, ".")
	hasPuny, err := checkName(name)
	if err != nil {
		return "", netip.Addr{}, err
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if endsInNumber(last) {
		ip, err := parseIPv4(name)
		if err != nil {
			return "", netip.Addr{}, err
		}
		return canonicalIPv4(name, ip), ip, nil
	}
	if hasPuny {
		// An ASCII "xn--" label is IDNA in disguise: it must decode to a
		// valid U-label, or "xn--" could smuggle anything. This runs on the
		// mapper's own output too, because x/net/idna's Unicode path is
		// more lenient than its punycode path (it maps "0ℵ" to "xn--0-0hc"
		// and then rejects "xn--0-0hc" under the Bidi rule), and what we
		// return must be accepted when it comes back to us.
		s, err := idnaProfile.ToASCII(name)
		if err != nil {
			return "", netip.Addr{}, fmt.Errorf("not a valid internationalised domain name: %v", err)
		}
		if s != name {
			return "", netip.Addr{}, fmt.Errorf("punycode label is not in canonical form (it normalises to %q)", s)
		}
	}
	return name, netip.Addr{}, nil
}

// checkName validates a lower-case ASCII name without its trailing dot and
// reports whether some label starts with the punycode prefix "xn--".
func checkName(name string) (hasPuny bool, err error) {
	if name == "" {
		return false, errors.New("empty host")
	}
	if len(name) > maxNameLen {
		return false, fmt.Errorf("name is %d characters long, more than the %d allowed", len(name), maxNameLen)
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '.' {
			c := name[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false, badChar(c)
			}
			continue
		}
		label := name[start:i]
		switch {
		case label == "":
			return false, errors.New("empty label (a leading dot, or two dots in a row)")
		case len(label) > maxLabelLen:
			return false, fmt.Errorf("label %q is %d characters long, more than the %d allowed", label, len(label), maxLabelLen)
		case strings.HasPrefix(label, "xn--"):
			hasPuny = true
		}
		start = i + 1
	}
	return hasPuny, nil
}

// badChar explains why a byte can never be part of a host.
func badChar(c byte) error {
	switch {
	case c == '%':
		return errors.New(`'%' is not allowed in a host (no percent-encoding, no IPv6 zones)`)
	case c == ' ' || c < 0x20 || c == 0x7f:
		return errors.New("spaces and control characters are not allowed in a host")
	case c == '/':
		return errors.New(`'/' is not allowed in a host: a path is not part of it`)
	case c == '@':
		return errors.New(`'@' is not allowed in a host: user information is not part of it`)
	case c == ':':
		return errors.New(`':' is only allowed in an IPv6 address`)
	case c >= 0x80:
		return errors.New("not a valid internationalised domain name")
	default:
		return fmt.Errorf("character %q is not allowed in a host", c)
	}
}

// normalizeIPv6 accepts "::1" and "[::1]". A port, a zone or an IPv4 address
// in brackets are errors: the caller has already split host from port.
func normalizeIPv6(raw string) (string, netip.Addr, error) {
	s := raw
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return "", netip.Addr{}, errors.New(`'[' opens an IPv6 address that must end with ']' (a port is not part of the host)`)
		}
		s = s[1 : len(s)-1]
	}
	if strings.ContainsAny(s, "[]") {
		return "", netip.Addr{}, errors.New(`'[' and ']' may only enclose a whole IPv6 address`)
	}
	if !strings.Contains(s, ":") {
		return "", netip.Addr{}, errors.New("brackets are only for IPv6 addresses")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Is6() || ip.Zone() != "" {
		// '%' was rejected before we got here, so no zone can reach
		// ParseAddr; the Zone check is a second lock on the same door.
		return "", netip.Addr{}, fmt.Errorf("%q is not a valid IPv6 address (':' is only allowed in one, and a port is not part of the host)", raw)
	}
	if s == raw {
		// Already canonical input should not allocate a second copy.
		var buf [46]byte
		if b := ip.AppendTo(buf[:0]); string(b) == raw {
			return raw, ip, nil
		}
	}
	return ip.String(), ip, nil
}

// IsLocalhostName reports whether a normalised host is "localhost" or ends in
// ".localhost". RFC 6761 reserves those names for loopback, and resolvers are
// allowed to answer them without asking DNS, so the dial-time address check
// alone cannot be relied on to see them: the proxy refuses them by name too.
func IsLocalhostName(host string) bool {
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
