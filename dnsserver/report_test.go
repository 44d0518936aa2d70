package dnsserver

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// withReport swaps in a copy of the env's policy with report mode on or off.
func withReport(e *testEnv, on bool) {
	p := *e.pol.Load()
	p.Report = on
	e.pol.Store(&p)
}

// TestReportModeAnswersUnlistedNames: in report mode a name off the
// allowlist is answered (reason would-deny), so that a transparent client
// reaches the proxy, which logs it; the address policy still refuses an
// answer with an internal address, localhost stays refused, and the same
// name is refused again once the policy enforces.
func TestReportModeAnswersUnlistedNames(t *testing.T) {
	e := startEnv(t, Options{}, "listed.example.")
	e.res.set("unlisted.example.", "192.0.2.7")
	e.res.set("internal.example.", "10.1.2.3")
	withReport(e, true)

	r := e.query(t, "udp", "unlisted.example.", dns.TypeA)
	d := <-e.decisions
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(answerAddrs(r), []string{"192.0.2.7"}) ||
		d.Verdict != VerdictAnswer || d.Reason != ReasonWouldDeny {
		t.Fatalf("report mode: %s %v, decision %s %q; want the address, would-deny",
			dns.RcodeToString[r.Rcode], answerAddrs(r), d.Verdict, d.Reason)
	}
	for name, reason := range map[string]string{
		"internal.example.": ReasonAddressPolicy + ": ",
		"localhost.":        ReasonLocalhost,
	} {
		r := e.query(t, "udp", name, dns.TypeA)
		d := <-e.decisions
		if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 || !strings.HasPrefix(d.Reason, reason) {
			t.Errorf("%s in report mode: %s %v, reason %q; want REFUSED, %q", name,
				dns.RcodeToString[r.Rcode], answerAddrs(r), d.Reason, reason)
		}
	}

	withReport(e, false)
	r = e.query(t, "udp", "unlisted.example.", dns.TypeA)
	if d := <-e.decisions; r.Rcode != dns.RcodeRefused || d.Reason != ReasonAllowlist {
		t.Fatalf("enforce mode: %s, reason %q; want REFUSED by the allowlist", dns.RcodeToString[r.Rcode], d.Reason)
	}
}
