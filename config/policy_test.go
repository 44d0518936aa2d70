package config

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/hookgate/hookgate/allowlist"
)

// TestPolicyFromConfig: the compiled policy holds the config's entries
// themselves, the host's own addresses (and, with sinkhole, the sinkhole
// addresses) in its address policy, and the sinkhole only when asked for.
func TestPolicyFromConfig(t *testing.T) {
	const base = "network:\n  allowlist:\n    - {domain: api.example.com, addresses: [203.0.113.0/24]}\n    - {domain: \"*.example.org\"}\n"
	own := netip.MustParseAddr("198.51.100.1")
	sink := netip.MustParseAddr("198.51.100.53")
	for _, c := range []struct {
		yaml     string
		sinkhole bool
	}{{base, false}, {base + "  dns: {denied: sinkhole}\n", true}} {
		cfg, err := Parse("t.yaml", []byte(c.yaml), Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := cfg.Policy(PolicyOptions{Own: []netip.Addr{own}, Sinkhole: []netip.Addr{sink}})
		if err != nil {
			t.Fatal(err)
		}
		if v := p.Decide("api.example.com"); v.Entry != &cfg.Entries[0] || v.Pattern != "api.example.com" {
			t.Errorf("verdict %+v: want the config's first entry itself", v)
		}
		if _, err := p.Addrs.Check(netip.AddrPortFrom(own, 443)); err == nil {
			t.Errorf("own address %v is dialable", own)
		}
		_, err = p.Addrs.Check(netip.AddrPortFrom(sink, 443))
		if c.sinkhole != (err != nil) || c.sinkhole != slices.Equal(p.Sinkhole, []netip.Addr{sink}) {
			t.Errorf("sinkhole %v: address blocked %v, Sinkhole %v", c.sinkhole, err != nil, p.Sinkhole)
		}
	}
}

func testPolicy(t *testing.T) *Policy {
	t.Helper()
	al, err := allowlist.New([]string{"api.example.com", "*.example.org", "localhost", "10.0.0.1", "198.51.100.7"})
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &Policy{Allowlist: al, Addrs: addrs, Entries: []Entry{
		{Addresses: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
	}}
}

// TestJudge: one function judges a name, then every address it resolves
// to: the allowlist before any lookup, localhost names, the address
// policy, then the matched entry's pins; the verdict points at the
// compiled entry.
func TestJudge(t *testing.T) {
	p := testPolicy(t)
	tests := []struct {
		name    string
		host    string
		answer  []string // what the lookup returns
		want    any      // the error type, nil for none
		lookups int
	}{
		{"not allowed, never looked up", "evil.example.net", []string{"203.0.113.1"}, &NotAllowedError{}, 0},
		{"localhost, never looked up", "localhost", []string{"203.0.113.1"}, &LocalhostError{}, 0},
		{"inside its pins", "api.example.com", []string{"203.0.113.9"}, nil, 1},
		{"outside its pins", "api.example.com", []string{"203.0.113.9", "198.51.100.9"}, &PinnedError{}, 1},
		{"private before pins", "api.example.com", []string{"10.0.0.1"}, &allowlist.BlockedError{}, 1},
		{"no pins, public", "a.example.org", []string{"198.51.100.9"}, nil, 1},
		{"no pins, one private", "a.example.org", []string{"198.51.100.9", "192.168.1.1"}, &allowlist.BlockedError{}, 1},
		{"private IP literal, never looked up", "10.0.0.1", nil, &allowlist.BlockedError{}, 0},
		{"public IP literal", "198.51.100.7", nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookups := 0
			lookup := func(context.Context, string) ([]netip.Addr, error) {
				lookups++
				var out []netip.Addr
				for _, a := range tt.answer {
					out = append(out, netip.MustParseAddr(a))
				}
				return out, nil
			}
			host, ip, err := allowlist.NormalizeHost(tt.host)
			if err != nil {
				t.Fatal(err)
			}
			v, addrs, err := p.Judge(context.Background(), host, ip, 443, lookup)
			if lookups != tt.lookups {
				t.Errorf("%d lookups, want %d", lookups, tt.lookups)
			}
			switch want := tt.want.(type) {
			case nil:
				if err != nil || len(addrs) == 0 {
					t.Errorf("refused (%v) or no addresses (%v)", err, addrs)
				}
			case *NotAllowedError:
				if !errors.As(err, &want) || v.Allowed {
					t.Errorf("err %v, verdict %+v: want not allowed", err, v)
				}
			case *LocalhostError:
				if !errors.As(err, &want) {
					t.Errorf("err %v: want %T", err, want)
				}
			case *allowlist.BlockedError:
				if !errors.As(err, &want) {
					t.Errorf("err %v: want %T", err, want)
				}
			case *PinnedError:
				if !errors.As(err, &want) {
					t.Errorf("err %v: want %T", err, want)
				}
			}
		})
	}
	if v := p.Decide("api.example.com"); v.Entry != &p.Entries[0] {
		t.Errorf("verdict entry %p, want the policy's own %p", v.Entry, &p.Entries[0])
	}
	if v := p.Decide("a.example.org"); !v.Allowed || v.Entry == nil || v.Entry.Transform != nil || v.Pattern != "*.example.org" {
		t.Errorf("an entry beyond Entries: %+v, want allowed with an empty entry", v)
	}
	// A nil lookup judges the name alone.
	if _, addrs, err := p.Judge(context.Background(), "api.example.com", netip.Addr{}, 443, nil); err != nil || addrs != nil {
		t.Errorf("name only: %v, %v", addrs, err)
	}
}

// TestJudgeUnlisted: report mode's judging of a host the allowlist denies
// skips the allowlist and any entry's pins, never the rest: a public
// answer passes with an entry that adds nothing, a private one, localhost
// names and private literals are refused.
func TestJudgeUnlisted(t *testing.T) {
	p := testPolicy(t)
	answer := map[string][]netip.Addr{
		"evil.example.net":     {netip.MustParseAddr("198.51.100.9")},
		"internal.example.net": {netip.MustParseAddr("192.168.1.1")},
		"api.example.com":      {netip.MustParseAddr("198.51.100.9")}, // outside its pins
	}
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) { return answer[host], nil }
	for host, ok := range map[string]bool{
		"evil.example.net":     true,
		"api.example.com":      true,
		"internal.example.net": false,
		"localhost":            false,
		"10.0.0.1":             false,
	} {
		name, ip, err := allowlist.NormalizeHost(host)
		if err != nil {
			t.Fatal(err)
		}
		v, addrs, err := p.JudgeUnlisted(context.Background(), name, ip, 443, lookup)
		if ok != (err == nil) || v.Allowed || v.Entry == nil || v.Entry.Transform != nil || v.Pattern != "" {
			t.Errorf("%s: verdict %+v, addrs %v, err %v; want passed %v with an entry that adds nothing", host, v, addrs, err, ok)
		}
	}
}
