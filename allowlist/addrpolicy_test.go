package allowlist

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCheckDefaults(t *testing.T) {
	p, err := NewAddrPolicy(AddrPolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range classCases {
		if tc.addr == "" {
			continue
		}
		t.Run(tc.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tc.addr)
			class, err := p.Check(netip.AddrPortFrom(a, 443))
			if class != tc.want {
				t.Errorf("Check(%s) class = %v, want %v", a, class, tc.want)
			}
			if (err == nil) != (tc.want == ClassPublic) {
				t.Errorf("Check(%s) error = %v; want blocked iff not public", a, err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	p, err := NewAddrPolicy(AddrPolicyOptions{
		AllowCIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.20.0.0/16"),
			netip.MustParsePrefix("169.254.169.254/32"),
			netip.MustParsePrefix("::ffff:192.168.1.0/120"), // mapped form, must behave as 192.168.1.0/24
			netip.MustParsePrefix("fd12:3456::/32"),
			netip.MustParsePrefix("64:ff9b::a00:0/104"), // NAT64 of 10/8
			netip.MustParsePrefix("100.64.0.0/10"),
		},
		Own: []netip.Addr{
			netip.MustParseAddr("203.0.113.7"),
			netip.MustParseAddr("10.20.0.1"),
			netip.MustParseAddr("::ffff:198.51.100.9"),
			netip.MustParseAddr("fe80::1%eth0"),
		},
		Exempt: []netip.AddrPort{
			netip.MustParseAddrPort("127.0.0.1:8080"),
			netip.MustParseAddrPort("[::1]:9090"),
			netip.MustParseAddrPort("10.20.0.1:7000"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ap      string
		class   Class
		allowed bool
	}{
		{"public", "8.8.8.8:443", ClassPublic, true},
		{"private reopened", "10.20.3.4:443", ClassPrivate, true},
		{"private reopened lower edge", "10.20.0.0:443", ClassPrivate, true},
		{"private reopened upper edge", "10.20.255.255:443", ClassPrivate, true},
		{"private below reopened", "10.19.255.255:443", ClassPrivate, false},
		{"private above reopened", "10.21.0.0:443", ClassPrivate, false},
		{"private reopened mapped addr", "[::ffff:10.20.3.4]:443", ClassPrivate, true},
		{"private by mapped prefix", "192.168.1.77:443", ClassPrivate, true},
		{"private by mapped prefix, mapped addr", "[::ffff:192.168.1.77]:443", ClassPrivate, true},
		{"private outside mapped prefix", "192.168.2.1:443", ClassPrivate, false},
		{"metadata reopened exactly", "169.254.169.254:80", ClassMetadata, true},
		{"link-local next to it stays", "169.254.169.253:80", ClassLinkLocal, false},
		{"unique local reopened", "[fd12:3456::1]:443", ClassUniqueLocal, true},
		{"unique local other", "[fd12:3457::1]:443", ClassUniqueLocal, false},
		{"nat64 private reopened by v6 prefix", "[64:ff9b::10.1.1.1]:443", ClassPrivate, true},
		{"nat64 loopback never", "[64:ff9b::127.0.0.1]:443", ClassLoopback, false},
		{"cgnat reopened", "100.64.0.1:443", ClassCGNAT, true},
		{"alibaba metadata reopened by the cgnat range", "100.100.100.200:80", ClassMetadata, true},
		{"loopback", "127.0.0.1:443", ClassLoopback, false},
		{"loopback mapped", "[::ffff:127.0.0.1]:443", ClassLoopback, false},
		{"loopback v6", "[::1]:443", ClassLoopback, false},
		{"ipv4-compatible", "[::10.20.3.4]:443", ClassIPv4Compatible, false},
		{"exempt exact", "127.0.0.1:8080", ClassLoopback, true},
		{"exempt mapped", "[::ffff:127.0.0.1]:8080", ClassLoopback, true},
		{"exempt other port", "127.0.0.1:8081", ClassLoopback, false},
		{"exempt other address", "127.0.0.2:8080", ClassLoopback, false},
		{"exempt v6", "[::1]:9090", ClassLoopback, true},
		{"exempt v6 other port", "[::1]:9091", ClassLoopback, false},
		{"exempt beats own", "10.20.0.1:7000", ClassPrivate, true},
		{"own public", "203.0.113.7:443", ClassOwn, false},
		{"own inside allowed cidr", "10.20.0.1:443", ClassOwn, false},
		{"own mapped in options", "198.51.100.9:443", ClassOwn, false},
		{"own mapped in dial", "[::ffff:203.0.113.7]:443", ClassOwn, false},
		{"own zone ignored", "[fe80::1%eth1]:443", ClassOwn, false},
		{"public next to own", "203.0.113.8:443", ClassPublic, true},
		{"invalid", "", ClassInvalid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ap netip.AddrPort
			if tc.ap != "" {
				ap = netip.MustParseAddrPort(tc.ap)
			}
			class, err := p.Check(ap)
			if class != tc.class {
				t.Errorf("Check(%s) class = %v, want %v", ap, class, tc.class)
			}
			if tc.allowed {
				if err != nil {
					t.Errorf("Check(%s) = %v, want allowed", ap, err)
				}
				return
			}
			var be *BlockedError
			if !errors.As(err, &be) {
				t.Fatalf("Check(%s) error = %v (%T), want *BlockedError", ap, err, err)
			}
			if be.Class != tc.class || be.Addr != ap.Addr().Unmap().WithZone("") {
				t.Errorf("BlockedError = %+v, want class %v, unmapped address of %s", be, tc.class, ap)
			}
		})
	}
}

func TestBlockedErrorText(t *testing.T) {
	p, err := NewAddrPolicy(AddrPolicyOptions{Own: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	if err != nil {
		t.Fatal(err)
	}
	for ap, want := range map[string]string{
		"10.0.0.1:80":                   "address 10.0.0.1 is private",
		"[::ffff:169.254.169.254]:80":   "address 169.254.169.254 is cloud metadata",
		"192.0.2.1:80":                  "address 192.0.2.1 is the gateway's own address",
		"[2001:0:808:808::80ff:fffe]:1": "address 2001:0:808:808::80ff:fffe is loopback",
	} {
		_, err := p.Check(netip.MustParseAddrPort(ap))
		if err == nil || err.Error() != want {
			t.Errorf("Check(%s) error = %v, want %q", ap, err, want)
		}
	}
}

// A caller that judged a host's answers names the host in the error.
func TestBlockedErrorNamesHost(t *testing.T) {
	for _, tc := range []struct {
		err  BlockedError
		want string
	}{
		{BlockedError{Host: "db.test", Addr: netip.MustParseAddr("10.0.0.1"), Class: ClassPrivate}, "db.test resolves to 10.0.0.1, which is a private address"},
		{BlockedError{Host: "10.0.0.1", Addr: netip.MustParseAddr("10.0.0.1"), Class: ClassPrivate}, "10.0.0.1 is a private address"},
		{BlockedError{Host: "gw.test", Addr: netip.MustParseAddr("192.0.2.1"), Class: ClassOwn}, "gw.test resolves to 192.0.2.1, which is the gateway's own address"},
		{BlockedError{Host: "localhost", Class: ClassLoopback}, "localhost names a loopback address"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestCheckAllowDoesNotAllocate(t *testing.T) {
	p, err := NewAddrPolicy(AddrPolicyOptions{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	aps := []netip.AddrPort{netip.MustParseAddrPort("8.8.8.8:443"), netip.MustParseAddrPort("[::ffff:10.1.2.3]:443")}
	if n := testing.AllocsPerRun(100, func() {
		for _, ap := range aps {
			if _, err := p.Check(ap); err != nil {
				t.Fatal(err)
			}
		}
	}); n != 0 {
		t.Errorf("Check allocated %v times per run, want 0", n)
	}
}

func TestValidateAllowCIDR(t *testing.T) {
	for _, tc := range []struct {
		cidr, wantErr string
	}{
		{"10.0.0.0/8", ""},
		{"10.0.0.0/7", ""},
		{"169.254.169.254/32", ""},
		{"126.0.0.0/8", ""},
		{"128.0.0.0/1", ""},
		{"fd00::/8", ""},
		{"::1:0:0/96", ""},
		{"::ffff:10.0.0.0/104", ""},
		{"0.0.0.0/0", `"0.0.0.0/0" would include loopback 127.0.0.0/8, which is never allowed; list the ranges you need, e.g. "10.20.0.0/16"`},
		{"0.0.0.0/1", `"0.0.0.0/1" would include loopback 127.0.0.0/8, which is never allowed; list the ranges you need, e.g. "10.20.0.0/16"`},
		{"127.0.0.1/32", `"127.0.0.1/32" would include loopback 127.0.0.0/8, which is never allowed; list the ranges you need, e.g. "10.20.0.0/16"`},
		{"126.0.0.0/7", `"126.0.0.0/7" would include loopback 127.0.0.0/8, which is never allowed; list the ranges you need, e.g. "10.20.0.0/16"`},
		{"::ffff:127.0.0.0/104", `"::ffff:127.0.0.0/104" would include loopback 127.0.0.0/8, which is never allowed; list the ranges you need, e.g. "10.20.0.0/16"`},
		{"::/0", `"::/0" would include loopback ::1 and the IPv4-compatible range ::/96, which are never allowed; list the ranges you need, e.g. "fd00:1234::/32"`},
		{"::1/128", `"::1/128" would include loopback ::1 and the IPv4-compatible range ::/96, which are never allowed; list the ranges you need, e.g. "fd00:1234::/32"`},
		{"::a00:0/104", `"::a00:0/104" would include loopback ::1 and the IPv4-compatible range ::/96, which are never allowed; list the ranges you need, e.g. "fd00:1234::/32"`},
		{"10.0.0.1/8", `"10.0.0.1/8" has bits set after the prefix length; did you mean "10.0.0.0/8"?`},
	} {
		t.Run(tc.cidr, func(t *testing.T) {
			err := ValidateAllowCIDR(netip.MustParsePrefix(tc.cidr))
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("ValidateAllowCIDR(%s) = %v, want nil", tc.cidr, err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("ValidateAllowCIDR(%s) = %v, want %q", tc.cidr, err, tc.wantErr)
			}
			if _, err := NewAddrPolicy(AddrPolicyOptions{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix(tc.cidr)}}); err == nil {
				t.Errorf("NewAddrPolicy accepted %s", tc.cidr)
			}
		})
	}
	if err := ValidateAllowCIDR(netip.Prefix{}); err == nil {
		t.Error("ValidateAllowCIDR(zero Prefix) = nil, want an error")
	}
}

func TestNewAddrPolicyErrors(t *testing.T) {
	for name, o := range map[string]AddrPolicyOptions{
		"invalid own":      {Own: []netip.Addr{{}}},
		"invalid exempt":   {Exempt: []netip.AddrPort{{}}},
		"exempt no port":   {Exempt: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}},
		"invalid cidr":     {AllowCIDRs: []netip.Prefix{{}}},
		"loopback in cidr": {AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewAddrPolicy(o); err == nil {
				t.Error("NewAddrPolicy = nil error, want one")
			}
		})
	}
}
