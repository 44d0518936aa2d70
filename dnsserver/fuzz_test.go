package dnsserver

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
)

// policyResolver fails the fuzz run if asked about a name the allowlist
// denies (that would be an exfiltration path), and otherwise answers with a
// public or a blocked address depending on the name.
type policyResolver struct {
	t *testing.T
	p *config.Policy
}

func (r policyResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	name := strings.TrimSuffix(host, ".")
	if !r.p.Allowlist.Decide(name).Allowed {
		r.t.Errorf("upstream lookup of %q, which the allowlist denies", host)
	}
	switch {
	case strings.HasPrefix(name, "p"):
		return []netip.Addr{netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("10.0.0.1")}, nil
	case network == "ip6":
		return []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::1")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("203.0.113.1")}, nil
}

func FuzzServeDNS(f *testing.F) {
	for _, name := range []string{"allowed.test.", "www.example.com.", "p.example.com.", "ALLOWED.test.", "x.attacker.example.", "localhost.", "127.0.0.1.", `a\000b.example.com.`, "."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeHTTPS, dns.TypeANY} {
			m := new(dns.Msg)
			m.SetQuestion(name, qt)
			if qt == dns.TypeAAAA {
				m.SetEdns0(4096, true)
			}
			if b, err := m.Pack(); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte{})
	f.Add(make([]byte, 12))

	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(data); err != nil {
			return
		}
		p := mustPolicy(t, "allowed.test", "*.example.com", "localhost")
		s := New(Options{
			Policy:   func() *config.Policy { return p },
			Resolver: policyResolver{t, p},
			Logger:   zerolog.Nop(),
		})
		defer s.Shutdown(context.Background())
		for _, network := range []string{"udp", "tcp"} {
			w := newRecorder(network)
			s.ServeDNS(w, req)
			if req.Response {
				if w.writes != 0 {
					t.Fatalf("answered a response")
				}
				continue
			}
			if w.writes != 1 {
				t.Fatalf("%d writes, want 1", w.writes)
			}
			back := new(dns.Msg)
			if back.Unpack(w.packed) != nil {
				continue // we could not pack an answer to this input: no reply
			}
			if back.Id != req.Id || !back.Response {
				t.Fatalf("answer id %d qr %v for query id %d", back.Id, back.Response, req.Id)
			}
			if network == "udp" && len(w.packed) > ednsSize {
				t.Fatalf("UDP answer of %d bytes", len(w.packed))
			}
			for _, rr := range back.Answer {
				var a netip.Addr
				switch rr := rr.(type) {
				case *dns.A:
					a, _ = netip.AddrFromSlice(rr.A)
				case *dns.AAAA:
					a, _ = netip.AddrFromSlice(rr.AAAA)
				default:
					t.Fatalf("answered %v", rr)
				}
				if _, err := p.Addrs.Check(netip.AddrPortFrom(a, 0)); err != nil {
					t.Fatalf("answered a blocked address: %v", err)
				}
			}
		}
	})
}
