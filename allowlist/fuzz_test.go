package allowlist

import (
	"net/netip"
	"strings"
	"testing"
)

func FuzzNormalizeHost(f *testing.F) {
	for _, tc := range normalizeCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		host, ip, err := NormalizeHost(raw)
		if err != nil {
			if host != "" || ip.IsValid() {
				t.Fatalf("NormalizeHost(%q) = %q, %v with error %v", raw, host, ip, err)
			}
			return
		}
		if ip.IsValid() && host != ip.String() {
			t.Fatalf("NormalizeHost(%q) = %q, but ip.String() = %q", raw, host, ip)
		}
		if !ip.IsValid() {
			if len(host) > maxNameLen || strings.HasSuffix(host, ".") || host != strings.ToLower(host) {
				t.Fatalf("NormalizeHost(%q) = %q: not a canonical name", raw, host)
			}
			if isIPLiteral(host) {
				t.Fatalf("NormalizeHost(%q) = name %q that Decide would take for an IP literal", raw, host)
			}
		}
		host2, ip2, err := NormalizeHost(host)
		if err != nil || host2 != host || ip2 != ip {
			t.Fatalf("not idempotent: NormalizeHost(%q) = %q, %v; NormalizeHost(that) = %q, %v, %v", raw, host, ip, host2, ip2, err)
		}
	})
}

func FuzzParseDomain(f *testing.F) {
	for _, tc := range parseDomainCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		pattern, kind, err := ParseDomain(raw)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseDomain(%q): empty error text", raw)
			}
			return
		}
		// A pattern parses to itself, so a config can be written back.
		p2, k2, err := ParseDomain(pattern)
		if err != nil || p2 != pattern || k2 != kind {
			t.Fatalf("ParseDomain(%q) = %q, %v; ParseDomain(that) = %q, %v, %v", raw, pattern, kind, p2, k2, err)
		}
		// And a policy made of it allows what it names.
		p, err := New([]string{raw})
		if err != nil {
			t.Fatalf("New([%q]): %v", raw, err)
		}
		switch kind {
		case KindExact:
			if !p.Decide(pattern).Allowed {
				t.Fatalf("policy %q does not allow %q", raw, pattern)
			}
		case KindWildcard:
			suffix := strings.TrimPrefix(pattern, "*.")
			if p.Decide(suffix).Allowed {
				t.Fatalf("wildcard %q allows its apex %q", raw, suffix)
			}
			if sub := "a." + suffix; len(sub) <= maxNameLen && !p.Decide(sub).Allowed {
				t.Fatalf("wildcard %q does not allow %q", raw, sub)
			}
		}
	})
}

// FuzzClassify checks that Classify never panics and that IPv4-mapped
// addresses are judged as their IPv4 address.
func FuzzClassify(f *testing.F) {
	for _, tc := range classCases {
		if tc.addr != "" {
			f.Add(netip.MustParseAddr(tc.addr).AsSlice())
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		c := Classify(a)
		if a.Is4() {
			if m := Classify(netip.AddrFrom16(a.As16())); m != c {
				t.Fatalf("Classify(%v) = %v but its mapped form is %v", a, c, m)
			}
		}
	})
}
