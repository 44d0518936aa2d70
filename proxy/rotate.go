package proxy

import "github.com/hookgate/hookgate/transform"

// injection is the transform a request inside an intercepted tunnel gets,
// and the generation of the policy it comes from.
type injection struct {
	rules      *transform.Rules
	generation uint64
}

// currentTransform is the transform a request inside this intercepted
// tunnel gets: the tunnel stays bound to what it was admitted with (its
// host, its entry), but the secret values come from the policy in force
// now when that still gives the tunnel's host the same entry with a
// transform. So a rotated token (a reload after a Secret changed) is
// injected from the next request on, without closing tunnels. Otherwise
// (the entry changed or lost its transform) the tunnel keeps the last
// values it injected, as every open connection keeps its policy.
func (h *mitmHandler) currentTransform() injection {
	p := h.s.policy.Load()
	v := p.Allowlist.Decide(h.t.host)
	if now := p.rules(v).Transform; v.Allowed && v.Entry.Domain == h.entry && now != nil {
		inj := injection{rules: now, generation: p.Generation}
		h.latest.Store(&inj)
		return inj
	}
	if last := h.latest.Load(); last != nil {
		return *last
	}
	return injection{rules: h.rules.Transform, generation: h.generation}
}
