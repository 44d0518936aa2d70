package allowlist

import (
	"strings"
	"testing"
)

// parseDomainCases is shared with the fuzz seeds. wantErr, when set, is the
// exact error text.
var parseDomainCases = []struct {
	name, in, want string
	kind           Kind
	wantErr        string
}{
	{name: "exact", in: "api.example.com", want: "api.example.com", kind: KindExact},
	{name: "exact case and dot", in: "API.Example.com.", want: "api.example.com", kind: KindExact},
	{name: "exact idna", in: "bücher.example", want: "xn--bcher-kva.example", kind: KindExact},
	{name: "wildcard", in: "*.example.com", want: "*.example.com", kind: KindWildcard},
	{name: "wildcard case dot idna", in: "*.BÜCHER.example.", want: "*.xn--bcher-kva.example", kind: KindWildcard},
	{name: "wildcard over tld", in: "*.com", want: "*.com", kind: KindWildcard},
	{name: "any", in: "*", want: "*", kind: KindAny},
	{name: "localhost parses", in: "localhost", want: "localhost", kind: KindExact},
	{name: "ipv4", in: "10.1.2.3", want: "10.1.2.3", kind: KindExact},
	{name: "ipv4 odd spelling", in: "0x0a.1.0x203", want: "10.1.2.3", kind: KindExact},
	{name: "ipv6", in: "2001:DB8::1", want: "2001:db8::1", kind: KindExact},
	{name: "ipv6 brackets", in: "[2001:db8::1]", want: "2001:db8::1", kind: KindExact},

	{name: "empty", in: "", wantErr: `empty domain; write a host ("api.example.com"), a wildcard ("*.example.com") or "*"`},
	{name: "url", in: "https://api.x.com/v1", wantErr: `a domain, not a URL; use "api.x.com"`},
	{name: "url with port user case", in: "HTTPS://me@API.x.com:8443/v1?q#f", wantErr: `a domain, not a URL; use "api.x.com"`},
	{name: "url ipv6", in: "http://[::1]:80/", wantErr: `a domain, not a URL; use "::1"`},
	{name: "url wildcard", in: "https://*.x.com", wantErr: `a domain, not a URL; use "*.x.com"`},
	{name: "url bad host", in: "https://a..b/", wantErr: `a domain, not a URL; write only the host name, e.g. "api.example.com"`},
	{name: "path", in: "api.x.com/v1", wantErr: `a domain has no path; use "api.x.com"`},
	{name: "path on wildcard", in: "*.x.com/v1", wantErr: `a domain has no path; use "*.x.com"`},
	{name: "port", in: "api.x.com:443", wantErr: `a domain has no port; use "api.x.com"`},
	{name: "port on wildcard", in: "*.x.com:443", wantErr: `a domain has no port; use "*.x.com"`},
	{name: "port ipv6", in: "[::1]:443", wantErr: `a domain has no port; use "::1"`},
	{name: "port bad host", in: "a..b:443", wantErr: `a domain has no port; write only the host name`},
	{name: "spaces", in: " api.x.com ", wantErr: `spaces around a domain are not allowed; use "api.x.com"`},
	{name: "leading dot", in: ".x.com", wantErr: `a leading dot is not a wildcard; use "*.x.com" for its subdomains or "x.com" for the name itself`},
	{name: "double star", in: "*.*.x.com", wantErr: errStar},
	{name: "star in label", in: "a*.x.com", wantErr: errStar},
	{name: "star not leading", in: "api.*.x.com", wantErr: errStar},
	{name: "star star", in: "**", wantErr: errStar},
	{name: "star dot", in: "*.", wantErr: "empty host"},
	{name: "star no dot", in: "*x.com", wantErr: errStar},
	{name: "wildcard over ipv4", in: "*.10.1.2.3", wantErr: `a wildcard cannot stand over an IP address; name the address alone: "10.1.2.3"`},
	{name: "wildcard over short ipv4", in: "*.1.2", wantErr: `a wildcard cannot stand over an IP address; name the address alone: "1.0.0.2"`},
	{name: "wildcard over ipv6", in: "*.::1", wantErr: `a wildcard cannot stand over an IP address; name the address alone: "::1"`},
	{name: "two trailing dots", in: "x.com..", wantErr: "empty label (a leading dot, or two dots in a row)"},
	{name: "idna invalid", in: "xn--zz.com", wantErr: `not a valid internationalised domain name: idna: invalid label "zz"`},
	{name: "ends in bad number", in: "example.123", wantErr: `"example.123" ends in a number but is not an IPv4 address: "example" is not a number`},
	{name: "zone", in: "fe80::1%eth0", wantErr: `'%' is not allowed in a host (no percent-encoding, no IPv6 zones)`},
	{name: "too long label", in: strings.Repeat("a", 64) + ".com", wantErr: `label "` + strings.Repeat("a", 64) + `" is 64 characters long, more than the 63 allowed`},
}

func TestParseDomain(t *testing.T) {
	for _, tc := range parseDomainCases {
		t.Run(tc.name, func(t *testing.T) {
			got, kind, err := ParseDomain(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParseDomain(%q) = %q, %v, %v; want error %q", tc.in, got, kind, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDomain(%q): %v", tc.in, err)
			}
			if got != tc.want || kind != tc.kind {
				t.Errorf("ParseDomain(%q) = %q, %v; want %q, %v", tc.in, got, kind, tc.want, tc.kind)
			}
		})
	}
}

// A suggested fix must itself parse, or the hint sends the user in circles.
func TestParseDomainSuggestionsParse(t *testing.T) {
	for _, tc := range parseDomainCases {
		_, fix, ok := strings.Cut(tc.wantErr, `use "`)
		if !ok {
			continue
		}
		fix, _, _ = strings.Cut(fix, `"`)
		t.Run(tc.name, func(t *testing.T) {
			if got, _, err := ParseDomain(fix); err != nil || got != fix {
				t.Errorf("suggested fix %q for %q parses to %q, %v; want itself", fix, tc.in, got, err)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindExact: "exact", KindWildcard: "wildcard", KindAny: "any", 9: "Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
