package proxy

import "github.com/hookgate/hookgate/config"

// injection is the entry a request inside an intercepted tunnel is
// injected and scrubbed with, and the generation of the policy it belongs
// to.
type injection struct {
	entry      *config.Entry
	generation uint64
}

// currentEntry is the entry a request inside this intercepted tunnel gets:
// the tunnel stays bound to what it was admitted with (its host, its
// allowlist pattern, its judged addresses), but the entry comes from the
// policy in force now when that still matches the tunnel's host with the
// same pattern, an entry that injects, and pins that the tunnel's
// addresses are inside. So a rotated token (a reload after a Secret
// changed) is injected from the next request on, without closing tunnels.
// Otherwise (the pattern is gone, no longer injects, or pins the host
// elsewhere) the tunnel keeps the entry its last request had, as every
// open connection keeps its policy: a new credential never goes to an
// address its entry does not allow. A tenant's tunnel looks in its own
// tenant's policy only, never in the top-level one or another tenant's: a
// gone tenant keeps what it had.
func (h *mitmHandler) currentEntry() injection {
	p := h.s.policy.Load()
	if name := h.tunnel.tenant; name != "" {
		t, ok := p.Tenants.ByName(name)
		if !ok {
			return h.kept()
		}
		p = t.Policy
	}
	v := p.Decide(h.t.host)
	if v.Allowed && v.Pattern == h.tunnel.entry && v.Entry.Transform != nil &&
		p.CheckAddrs(v.Entry, h.t.host, h.t.port, h.dest.Addrs) == nil {
		now := injection{entry: v.Entry, generation: p.Generation}
		if h.kept() != now {
			// Stored only when it changes: most requests find the same.
			// A copy of its own, so that only a change allocates (the
			// address of now would move now itself to the heap).
			changed := now
			h.latest.Store(&changed)
		}
		return now
	}
	return h.kept()
}

// kept is the entry the tunnel's last request had, or the one it was
// admitted with.
func (h *mitmHandler) kept() injection {
	if last := h.latest.Load(); last != nil {
		return *last
	}
	return h.admitted
}
