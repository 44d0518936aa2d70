package allowlist

import (
	"errors"
	"fmt"
	"strings"
)

// Kind is the shape of an allowlist pattern. It also orders precedence:
// an exact entry beats any wildcard, a wildcard beats "*".
type Kind uint8

const (
	// KindExact names one host or one IP literal: "api.example.com".
	KindExact Kind = iota
	// KindWildcard names every host below a domain, at any depth, but not
	// the domain itself: "*.example.com".
	KindWildcard
	// KindAny is "*": every host.
	KindAny
)

func (k Kind) String() string {
	switch k {
	case KindExact:
		return "exact"
	case KindWildcard:
		return "wildcard"
	case KindAny:
		return "any"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

const errStar = `"*" is only allowed as a whole leading label ("*.example.com") or alone`

// ParseDomain validates one `domain` value of network.allowlist and returns
// its normalised pattern: "api.x.com", "*.x.com", "*", or a canonical IP
// literal. Normalisation is that of [NormalizeHost], so a pattern compares
// equal to every spelling of the host it names.
//
// Decisions worth knowing:
//   - "*.com" is allowed: the operator asked for it, and it is no wider
//     than "*", which is allowed too.
//   - A wildcard over an IP address ("*.10.1.2.3") is an error: addresses
//     have no subdomains, and IP literals never match wildcards.
//   - "localhost" parses; the address policy blocks it whatever the list says.
//
// Errors are sentences a user can act on, with the fix where there is one.
func ParseDomain(raw string) (pattern string, kind Kind, err error) {
	if raw == "" {
		return "", 0, errors.New(`empty domain; write a host ("api.example.com"), a wildcard ("*.example.com") or "*"`)
	}
	if strings.TrimSpace(raw) != raw {
		return "", 0, fmt.Errorf("spaces around a domain are not allowed; use %q", strings.TrimSpace(raw))
	}
	if strings.Contains(raw, "://") {
		return "", 0, urlError(raw)
	}
	if raw == "*" {
		return "*", KindAny, nil
	}
	if err := shapeError(raw); err != nil {
		return "", 0, err
	}
	if rest, ok := strings.CutPrefix(raw, "*."); ok {
		if strings.Contains(rest, "*") {
			return "", 0, errors.New(errStar)
		}
		host, ip, err := NormalizeHost(rest)
		if err != nil {
			return "", 0, err
		}
		if ip.IsValid() {
			return "", 0, fmt.Errorf("a wildcard cannot stand over an IP address; name the address alone: %q", host)
		}
		return "*." + host, KindWildcard, nil
	}
	if strings.Contains(raw, "*") {
		return "", 0, errors.New(errStar)
	}
	host, _, err := NormalizeHost(raw)
	if err != nil {
		return "", 0, err
	}
	return host, KindExact, nil
}

// shapeError recognises the usual near-misses (a path, a port, a leading
// dot meant as a wildcard) and suggests the fix, before NormalizeHost would
// reject them with a less helpful message.
func shapeError(s string) error {
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		if fix, ok := suggest(s[:i]); ok {
			return fmt.Errorf("a domain has no path; use %q", fix)
		}
		return errors.New("a domain has no path; write only the host name")
	}
	if host, ok := cutPort(s); ok {
		if fix, ok := suggest(host); ok {
			return fmt.Errorf("a domain has no port; use %q", fix)
		}
		return errors.New("a domain has no port; write only the host name")
	}
	if strings.HasPrefix(s, ".") && !strings.HasPrefix(s, "..") {
		if fix, ok := suggest(s[1:]); ok {
			return fmt.Errorf(`a leading dot is not a wildcard; use "*.%s" for its subdomains or %q for the name itself`, fix, fix)
		}
	}
	return nil
}

// cutPort splits "host:port" and "[v6]:port"; a bare IPv6 address is not
// a host with a port.
func cutPort(s string) (host string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || i == len(s)-1 {
		return "", false
	}
	for _, c := range []byte(s[i+1:]) {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	if strings.HasPrefix(s, "[") && s[i-1] == ']' {
		return s[:i], true
	}
	if strings.Count(s, ":") == 1 {
		return s[:i], true
	}
	return "", false
}

// urlError explains that a URL was written where a domain belongs, and
// suggests the domain from inside it when there is a valid one.
func urlError(raw string) error {
	_, rest, _ := strings.Cut(raw, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if host, ok := cutPort(rest); ok {
		rest = host
	}
	if fix, ok := suggest(rest); ok {
		return fmt.Errorf("a domain, not a URL; use %q", fix)
	}
	return errors.New(`a domain, not a URL; write only the host name, e.g. "api.example.com"`)
}

// suggest returns the normalised pattern for s if s is a valid one, so that
// a suggested fix is itself always accepted.
func suggest(s string) (string, bool) {
	if s == "" || strings.ContainsAny(s, "/?#") {
		return "", false
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		// ParseDomain takes bare IPv6; suggest that spelling.
		s = s[1 : len(s)-1]
	}
	if _, ok := cutPort(s); ok {
		return "", false
	}
	p, _, err := ParseDomain(s)
	if err != nil {
		return "", false
	}
	return p, true
}
