package proxy

import (
	"fmt"

	"github.com/hookgate/hookgate/allowlist"
)

// judgeFor judges t against p on behalf of decision d: judge, plus what the
// decision line records about the judging (the policy's generation) and
// report mode.
func judgeFor(p *Policy, t target, d *decision) (allowlist.Verdict, *denial) {
	d.generation = p.Generation
	v, den := judge(p, t)
	return v, reportMode(p, t, d, den)
}

// reportMode waives the allowlist's refusal of t when p is in report mode:
// the decision is recorded as would-deny and the request goes on as a host
// with no entry (v stays not allowed), so nothing is injected, no pin
// applies, and every address dialled is still judged by the address policy.
// Every other refusal stands, names of the loopback interface included.
func reportMode(p *Policy, t target, d *decision, den *denial) *denial {
	if !p.Report || den == nil || den.code != CodeAllowlist || allowlist.IsLocalhostName(t.host) {
		return den
	}
	waived := *den
	waived.reason = fmt.Sprintf("%s is not on the allowlist; let through because network.mode is report", t.host)
	d.wouldDeny = &waived
	return nil
}
