package proxy

import "github.com/hookgate/hookgate/transform"

// currentTransform is the transform a request inside this intercepted
// tunnel gets: the tunnel stays bound to what it was admitted with (its
// host, its entry), but the secret values come from the policy in force
// now when that still gives the tunnel's host the same entry with a
// transform. So a rotated token (a reload after a Secret changed) is
// injected from the next request on, without closing tunnels. Otherwise
// (the entry changed or lost its transform) the tunnel keeps the last
// values it injected, as every open connection keeps its policy.
func (h *mitmHandler) currentTransform() *transform.Rules {
	p := h.s.policy.Load()
	v := p.Allowlist.Decide(h.t.host)
	if now := p.rules(v).Transform; v.Allowed && v.Entry.Domain == h.entry && now != nil {
		h.latest.Store(now)
		return now
	}
	if last := h.latest.Load(); last != nil {
		return last
	}
	return h.rules.Transform
}
