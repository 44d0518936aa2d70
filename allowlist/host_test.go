package allowlist

import (
	"net/netip"
	"strings"
	"testing"
)

// normalizeCases is shared with the fuzz seeds. want == "" means an error is
// expected; wantIP is set for IP literals.
var normalizeCases = []struct {
	name, in, want, wantIP string
}{
	// Names.
	{"plain", "api.example.com", "api.example.com", ""},
	{"single label", "intranet", "intranet", ""},
	{"upper case", "API.Example.COM", "api.example.com", ""},
	{"one trailing dot", "api.example.com.", "api.example.com", ""},
	{"two trailing dots", "api.example.com..", "", ""},
	{"only a dot", ".", "", ""},
	{"leading dot", ".example.com", "", ""},
	{"empty label", "a..example.com", "", ""},
	{"underscore", "_dmarc.example.com", "_dmarc.example.com", ""},
	{"hyphens in 3rd and 4th", "r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com", ""},
	{"digit-led label", "1password.com", "1password.com", ""},
	{"numeric inner label", "127.0.0.1.nip.example", "127.0.0.1.nip.example", ""},
	{"localhost", "LOCALHOST.", "localhost", ""},
	{"label of 63", strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com", ""},
	{"label of 64", strings.Repeat("a", 64) + ".com", "", ""},
	{"name of 253", name253(), name253(), ""},
	{"name of 253 plus dot", name253() + ".", name253(), ""},
	{"name of 254", "a" + name253(), "", ""},
	{"huge", strings.Repeat("a.", 5000), "", ""},

	// IDNA.
	{"idna", "bücher.example", "xn--bcher-kva.example", ""},
	{"idna upper", "BÜCHER.Example.", "xn--bcher-kva.example", ""},
	{"idna punycode as written", "xn--bcher-kva.example", "xn--bcher-kva.example", ""},
	{"idna punycode upper", "XN--BCHER-KVA.example", "xn--bcher-kva.example", ""},
	{"idna sharp s nontransitional", "faß.de", "xn--fa-hia.de", ""},
	{"idna fullwidth", "ｅｘａｍｐｌｅ。ｃｏｍ", "example.com", ""},
	{"idna ideographic trailing dot", "example.com。", "example.com", ""},
	{"idna emoji", "xn--ls8h.la", "xn--ls8h.la", ""},
	{"idna bad punycode", "xn--zz.com", "", ""},
	{"idna punycode of ascii", "xn--a.com", "", ""},
	{"idna disallowed rune", "⒈com", "", ""},
	{"idna zero width joiner", "a\u200db.com", "", ""},
	{"idna bidi label led by a digit", "0ℵ", "", ""},
	{"idna fullwidth colon", "a：b.com", "", ""},
	{"idna fullwidth solidus", "a／b.com", "", ""},
	{"idna fullwidth digits are IPv4", "１２７.０.０.１", "127.0.0.1", "127.0.0.1"},
	{"invalid utf8", "a\xff.com", "", ""},
	{"invalid utf8 alone", "\xc3", "", ""},

	// Hostile characters.
	{"percent", "example.com%2f", "", ""},
	{"percent encoded name", "%65xample.com", "", ""},
	{"space", "exa mple.com", "", ""},
	{"leading space", " example.com", "", ""},
	{"tab", "example.com\t", "", ""},
	{"nul", "example.com\x00.evil", "", ""},
	{"newline", "example.com\nX: y", "", ""},
	{"del", "example\x7f.com", "", ""},
	{"slash", "example.com/path", "", ""},
	{"backslash", `example.com\evil`, "", ""},
	{"at", "user@example.com", "", ""},
	{"port", "example.com:443", "", ""},
	{"star", "*.example.com", "", ""},
	{"question", "example.com?", "", ""},
	{"hash", "example.com#", "", ""},
	{"empty", "", "", ""},

	// IPv4, every inet_aton spelling.
	{"ipv4", "127.0.0.1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 trailing dot", "127.0.0.1.", "127.0.0.1", "127.0.0.1"},
	{"ipv4 decimal", "2130706433", "127.0.0.1", "127.0.0.1"},
	{"ipv4 decimal max", "4294967295", "255.255.255.255", "255.255.255.255"},
	{"ipv4 decimal overflow", "4294967296", "", ""},
	{"ipv4 decimal zero", "0", "0.0.0.0", "0.0.0.0"},
	{"ipv4 octal", "0177.0.0.1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 octal padded", "0000177.00.0.01", "127.0.0.1", "127.0.0.1"},
	{"ipv4 octal bad digit", "0178.0.0.1", "", ""},
	{"ipv4 octal 09", "1.2.3.09", "", ""},
	{"ipv4 octal whole", "017700000001", "127.0.0.1", "127.0.0.1"},
	{"ipv4 hex", "0x7f.0.0.1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 hex upper", "0X7F.0X0.0X0.0X1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 hex whole", "0x7f000001", "127.0.0.1", "127.0.0.1"},
	{"ipv4 hex empty is zero", "0x.0x.0x.0x", "0.0.0.0", "0.0.0.0"},
	{"ipv4 hex overflow", "0x100000000", "", ""},
	{"ipv4 hex last part", "1.0x1", "1.0.0.1", "1.0.0.1"},
	{"hexlike last label is a name", "1.0x1g", "1.0x1g", ""},
	{"replacement char", "a\ufffd.com", "", ""},
	{"ipv4 short 2", "127.1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 short 3", "127.0.1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 short 2 max", "1.16777215", "1.255.255.255", "1.255.255.255"},
	{"ipv4 short 2 overflow", "1.16777216", "", ""},
	{"ipv4 short 3 max", "1.2.65535", "1.2.255.255", "1.2.255.255"},
	{"ipv4 short 3 overflow", "1.2.65536", "", ""},
	{"ipv4 mixed", "0x7f.000.1", "127.0.0.1", "127.0.0.1"},
	{"ipv4 mixed metadata", "0xa9.254.0251.0376", "169.254.169.254", "169.254.169.254"},
	{"ipv4 part over 255", "256.0.0.1", "", ""},
	{"ipv4 last part over 255", "1.2.3.256", "", ""},
	{"ipv4 five parts", "1.2.3.4.5", "", ""},
	{"ipv4 empty part", "1..2.3", "", ""},
	{"name ending in number", "example.123", "", ""},
	{"name ending in hex", "example.0x1", "", ""},
	{"name ending in hexlike word", "example.0xg", "example.0xg", ""},
	{"ipv4 huge digits", strings.Repeat("9", 100), "", ""},

	// IPv6.
	{"ipv6", "::1", "::1", "::1"},
	{"ipv6 brackets", "[::1]", "::1", "::1"},
	{"ipv6 long", "0:0:0:0:0:0:0:1", "::1", "::1"},
	{"ipv6 upper", "[2001:DB8::A]", "2001:db8::a", "2001:db8::a"},
	{"ipv6 mapped", "::ffff:127.0.0.1", "::ffff:127.0.0.1", "::ffff:127.0.0.1"},
	{"ipv6 mapped hex", "[::FFFF:7F00:1]", "::ffff:127.0.0.1", "::ffff:127.0.0.1"},
	{"ipv6 zone", "fe80::1%eth0", "", ""},
	{"ipv6 zone brackets", "[fe80::1%25eth0]", "", ""},
	{"ipv6 unclosed", "[::1", "", ""},
	{"ipv6 port", "[::1]:443", "", ""},
	{"ipv6 nested brackets", "[[::1]]", "", ""},
	{"ipv4 in brackets", "[127.0.0.1]", "", ""},
	{"name in brackets", "[example.com]", "", ""},
	{"ipv6 garbage", "1:2:3", "", ""},
	{"ipv6 trailing dot", "::1.", "", ""},
}

func name253() string {
	// 4 labels of 62 + 3 dots = 251, plus ".a" = 253.
	l := strings.Repeat("b", 62)
	return l + "." + l + "." + l + "." + l + ".a"
}

func TestNormalizeHost(t *testing.T) {
	for _, tc := range normalizeCases {
		t.Run(tc.name, func(t *testing.T) {
			host, ip, err := NormalizeHost(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("NormalizeHost(%q) = %q, %v; want an error", tc.in, host, ip)
				}
				if host != "" || ip.IsValid() {
					t.Errorf("NormalizeHost(%q) returned %q, %v with its error; want zero values", tc.in, host, ip)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormalizeHost(%q): %v", tc.in, err)
			}
			if host != tc.want {
				t.Errorf("NormalizeHost(%q) host = %q, want %q", tc.in, host, tc.want)
			}
			if tc.wantIP == "" {
				if ip.IsValid() {
					t.Errorf("NormalizeHost(%q) ip = %v, want none", tc.in, ip)
				}
				return
			}
			if want := netip.MustParseAddr(tc.wantIP); ip != want {
				t.Errorf("NormalizeHost(%q) ip = %v, want %v", tc.in, ip, want)
			}
			if host != ip.String() {
				t.Errorf("NormalizeHost(%q) host %q != ip.String() %q", tc.in, host, ip.String())
			}
		})
	}
}

func TestNormalizeHostErrorText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty host"},
		{"a%2e.com", `'%' is not allowed in a host (no percent-encoding, no IPv6 zones)`},
		{"a b", "spaces and control characters are not allowed in a host"},
		{"a.com/x", `'/' is not allowed in a host: a path is not part of it`},
		{"u@a.com", `'@' is not allowed in a host: user information is not part of it`},
		{"a.com:80", `"a.com:80" is not a valid IPv6 address (':' is only allowed in one, and a port is not part of the host)`},
		{"a..com", "empty label (a leading dot, or two dots in a row)"},
		{"256.1", `"256.1" ends in a number but is not an IPv4 address: part 1 is more than 255`},
		{"example.123", `"example.123" ends in a number but is not an IPv4 address: "example" is not a number`},
		{"[1.2.3.4]", "brackets are only for IPv6 addresses"},
		{"0178.1", `"0178.1" ends in a number but is not an IPv4 address: "0178" starts with 0, so it is octal, but has the digit 8`},
		{"a\xff", "not a valid internationalised domain name: invalid UTF-8"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, _, err := NormalizeHost(tc.in)
			if err == nil || err.Error() != tc.want {
				t.Errorf("NormalizeHost(%q) error = %v, want %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestNormalizeHostFastPathDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"api.example.com", "a-b_c.d9.example", "127.0.0.1", "::1"} {
		t.Run(in, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, func() {
				if h, _, err := NormalizeHost(in); err != nil || h != in {
					t.Fatalf("NormalizeHost(%q) = %q, %v", in, h, err)
				}
			}); n != 0 {
				t.Errorf("NormalizeHost(%q) allocated %v times per run, want 0", in, n)
			}
		})
	}
}

func TestIsLocalhostName(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"a.localhost", true},
		{"a.b.localhost", true},
		{"notlocalhost", false},
		{"localhost.example.com", false},
		{"localhost6", false},
		{"", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			if got := IsLocalhostName(tc.host); got != tc.want {
				t.Errorf("IsLocalhostName(%q) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}
