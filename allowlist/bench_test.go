package allowlist

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchPolicy is 100,000 entries: half exact names, half wildcards. There is
// no "*", so a miss walks every lookup before it is denied.
func benchPolicy(b *testing.B) *Policy {
	b.Helper()
	domains := make([]string, 0, 100_000)
	for i := range 50_000 {
		domains = append(domains, fmt.Sprintf("api%d.svc%d.example.com", i, i%100))
		domains = append(domains, fmt.Sprintf("*.team%d.corp%d.example.net", i, i%50))
	}
	p, err := New(domains)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func BenchmarkDecide(b *testing.B) {
	p := benchPolicy(b)
	for _, bc := range []struct{ name, host string }{
		{"exact", "api4242.svc42.example.com"},
		{"deep_wildcard", "a.b.c.d.e.f.team4242.corp42.example.net"},
		{"miss", "a.b.c.d.e.f.nowhere.example.org"},
		{"ip", "192.0.2.1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(bc.host)
			}
		})
	}
}

func BenchmarkClassify(b *testing.B) {
	addrs := make([]netip.Addr, 0, len(classCases))
	for _, tc := range classCases {
		if tc.addr != "" {
			addrs = append(addrs, netip.MustParseAddr(tc.addr))
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, a := range addrs {
			Classify(a)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/addr")
}

func BenchmarkNormalizeHost(b *testing.B) {
	for _, bc := range []struct{ name, host string }{
		{"fast_path", "api4242.svc42.example.com"},
		{"upper_trailing_dot", "API4242.svc42.Example.COM."},
		{"idna", "bücher.example"},
		{"ipv4_odd", "0x7f.1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				NormalizeHost(bc.host)
			}
		})
	}
}

func BenchmarkCheck(b *testing.B) {
	p, err := NewAddrPolicy(AddrPolicyOptions{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		b.Fatal(err)
	}
	ap := netip.MustParseAddrPort("[::ffff:10.1.2.3]:443")
	b.ReportAllocs()
	for b.Loop() {
		p.Check(ap)
	}
}
