package dnsserver

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// The sinkhole addresses of these tests (those of sandbox exec).
var (
	sinkhole4 = netip.MustParseAddr("169.254.77.1")
	sinkhole6 = netip.MustParseAddr("fd68:676b::1")
)

// withSinkhole swaps in the env's policy with these sinkhole addresses.
func withSinkhole(e *testEnv, addrs ...netip.Addr) {
	p := *e.pol.Load()
	p.Sinkhole = addrs
	e.pol.Store(&p)
}

func TestSinkholeAnswers(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	seed(e.res)
	withSinkhole(e, sinkhole4, sinkhole6)

	tests := []struct {
		name    string
		qname   string
		qtype   uint16
		rcode   int
		verdict string
		addrs   []string
		reason  string   // prefix of Decision.Reason
		lookups []string // upstream lookups this query adds
	}{
		{"denied A", "secret-data.attacker.example.", dns.TypeA, dns.RcodeSuccess, VerdictSinkhole, []string{"169.254.77.1"}, ReasonAllowlist, nil},
		{"denied AAAA", "secret-data.attacker.example.", dns.TypeAAAA, dns.RcodeSuccess, VerdictSinkhole, []string{"fd68:676b::1"}, ReasonAllowlist, nil},
		{"denied HTTPS is empty", "secret-data.attacker.example.", dns.TypeHTTPS, dns.RcodeSuccess, VerdictSinkhole, nil, ReasonAllowlist, nil},
		{"denied SVCB is empty", "secret-data.attacker.example.", dns.TypeSVCB, dns.RcodeSuccess, VerdictSinkhole, nil, ReasonAllowlist, nil},
		{"denied TXT stays refused", "c2VjcmV0.attacker.example.", dns.TypeTXT, dns.RcodeRefused, VerdictRefused, nil, ReasonAllowlist, nil},
		{"wildcard apex", "example.com.", dns.TypeA, dns.RcodeSuccess, VerdictSinkhole, []string{"169.254.77.1"}, ReasonAllowlist, nil},
		{"resolves to a private address", "mixed.test.", dns.TypeA, dns.RcodeSuccess, VerdictSinkhole, []string{"169.254.77.1"},
			ReasonAddressPolicy + ": address 10.1.2.3 is private", []string{"ip4 mixed.test."}},
		{"resolves to metadata", "meta.test.", dns.TypeA, dns.RcodeSuccess, VerdictSinkhole, []string{"169.254.77.1"},
			ReasonAddressPolicy + ": address 169.254.169.254 is cloud metadata", []string{"ip4 meta.test."}},
		{"allowed names are answered as always", "allowed.test.", dns.TypeA, dns.RcodeSuccess, VerdictAnswer, []string{"203.0.113.10"}, ReasonAllowed, []string{"ip4 allowed.test."}},
		{"allowed TXT stays refused", "allowed.test.", dns.TypeTXT, dns.RcodeRefused, VerdictRefused, nil, ReasonType, nil},
		{"localhost stays refused", "a.localhost.", dns.TypeA, dns.RcodeRefused, VerdictRefused, nil, ReasonLocalhost, nil},
		{"IP literal stays refused", "0x7f.1.", dns.TypeA, dns.RcodeRefused, VerdictRefused, nil, ReasonIPLiteral, nil},
		{"bad name stays refused", `allowed\.test.`, dns.TypeA, dns.RcodeRefused, VerdictRefused, nil, ReasonBadName, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.res.Calls())
			r := e.query(t, "udp", tt.qname, tt.qtype)
			d := <-e.decisions
			if r.Rcode != tt.rcode || d.Verdict != tt.verdict {
				t.Errorf("rcode %s verdict %s, want %s %s (reason %q)", dns.RcodeToString[r.Rcode], d.Verdict,
					dns.RcodeToString[tt.rcode], tt.verdict, d.Reason)
			}
			if got := answerAddrs(r); !slices.Equal(got, tt.addrs) {
				t.Errorf("answer %v, want %v", got, tt.addrs)
			}
			if !strings.HasPrefix(d.Reason, tt.reason) {
				t.Errorf("reason %q, want %q", d.Reason, tt.reason)
			}
			if got := e.res.Calls()[before:]; !slices.Equal(got, tt.lookups) {
				t.Errorf("upstream lookups %q, want %q", got, tt.lookups)
			}
			for _, rr := range r.Answer {
				if tt.verdict == VerdictSinkhole && (rr.Header().Name != tt.qname || rr.Header().Ttl != sinkholeTTL) {
					t.Errorf("sinkhole answer header %v: want name %q and TTL %d", rr.Header(), tt.qname, sinkholeTTL)
				}
			}
		})
	}
}

// TestSinkholeFamilies: with only an IPv4 sinkhole, AAAA of a denied name
// is NODATA (clients go on to A), and an IPv4-mapped sinkhole address is
// answered as the IPv4 address it is.
func TestSinkholeFamilies(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	withSinkhole(e, netip.AddrFrom16(sinkhole4.As16()))
	for qtype, want := range map[uint16][]string{dns.TypeA: {"169.254.77.1"}, dns.TypeAAAA: nil} {
		r := e.query(t, "tcp", "denied.example.", qtype)
		d := <-e.decisions
		if got := answerAddrs(r); r.Rcode != dns.RcodeSuccess || d.Verdict != VerdictSinkhole || !slices.Equal(got, want) {
			t.Errorf("%s: %s %s %v, want NOERROR sinkhole %v", dns.TypeToString[qtype], dns.RcodeToString[r.Rcode], d.Verdict, got, want)
		}
	}
}

// TestSinkholeFollowsReload: the policy is read per query, so turning the
// sinkhole off (or on) applies to the next query.
func TestSinkholeFollowsReload(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	for i, sink := range [][]netip.Addr{nil, {sinkhole4}, nil} {
		withSinkhole(e, sink...)
		r := e.query(t, "udp", "denied.example.", dns.TypeA)
		d := <-e.decisions
		want, wantRcode := VerdictRefused, dns.RcodeRefused
		if sink != nil {
			want, wantRcode = VerdictSinkhole, dns.RcodeSuccess
		}
		if d.Verdict != want || r.Rcode != wantRcode {
			t.Errorf("step %d: %s %s, want %s", i, dns.RcodeToString[r.Rcode], d.Verdict, want)
		}
	}
}

// TestSinkholeLogLine: the decision line says sinkhole, why, and what was
// answered.
func TestSinkholeLogLine(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	withSinkhole(e, sinkhole4, sinkhole6)
	e.query(t, "udp", "denied.example.", dns.TypeA)
	<-e.decisions
	lines := e.log.Lines(t)
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1", len(lines))
	}
	l := lines[0]
	if l["verdict"] != VerdictSinkhole || l["reason"] != ReasonAllowlist || len(l["addrs"].([]any)) != 1 || l["addrs"].([]any)[0] != "169.254.77.1" {
		t.Errorf("log line = %v", l)
	}
}
