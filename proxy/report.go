package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/netip"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// judge is config.Policy.Judge on behalf of decision d: the decision line
// records the policy's generation, and report mode applies. The proxy
// (explicit, transparent, plain HTTP and tunnels) judges through it.
func judge(ctx context.Context, p *config.Policy, t target, d *decision, lookup func(context.Context, string) ([]netip.Addr, error)) (config.Verdict, []netip.Addr, error) {
	d.generation = p.Generation
	v, addrs, err := p.Judge(ctx, t.host, t.ip, t.port, lookup)
	if !reportWaives(p, t, err) {
		return v, addrs, err
	}
	d.wouldDeny = deny(CodeAllowlist, http.StatusForbidden, t.host,
		"%s is not on the allowlist; let through because network.mode is report", t.host)
	return p.JudgeUnlisted(ctx, t.host, t.ip, t.port, lookup)
}

// reportWaives reports whether report mode waives err, the policy's
// verdict on t: only the allowlist's refusal, never one of the address
// policy, and never for a name of the loopback interface. The target is
// then judged as a host with no entry (config.Policy.JudgeUnlisted):
// nothing is injected, nothing intercepted, no pin applies, and every
// address dialled is still judged by the address policy.
func reportWaives(p *config.Policy, t target, err error) bool {
	var refused *config.NotAllowedError
	return p.Report && errors.As(err, &refused) && !allowlist.IsLocalhostName(t.host)
}
