package hooks

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// combiner folds the handlers' results of one event into its Decision, in
// run order, and keeps the payload each next handler gets: the caller's,
// with the args rewritten so far by PreToolUse "overwrite" answers, in
// each dialect asked for (converted once per dialect, not per handler).
type combiner struct {
	ev        Event
	level     Verdict  // pre events: the strictest verdict so far
	reasons   []string // the reasons given at that level
	overwrite []rawMember
	perms     []string
	steps     []json.RawMessage
	term      string
	cont      bool // Stop: a handler asked to continue
	contWhy   []string
	stopped   bool // a deny ended a PreToolUse chain
	payloads  map[Dialect][]byte
}

func newCombiner(ev Event) *combiner {
	return &combiner{ev: ev, level: Allow, payloads: map[Dialect][]byte{ev.Kind.Dialect(): ev.Payload}}
}

// payloadFor returns the event's payload in dialect d.
func (c *combiner) payloadFor(d Dialect) ([]byte, error) {
	if p, ok := c.payloads[d]; ok {
		return p, nil
	}
	p, err := convertPayload(c.payloads[c.ev.Kind.Dialect()], c.ev.Kind.Dialect(), d)
	if err != nil {
		return nil, err
	}
	c.payloads[d] = p
	return p, nil
}

// raise records verdict v with its reason: a stricter verdict replaces the
// level and its reasons, an equal one adds its reason.
func (c *combiner) raise(v Verdict, reason string) {
	switch {
	case v.strictness() > c.level.strictness():
		c.level, c.reasons = v, nil
	case v.strictness() < c.level.strictness():
		return
	}
	if reason != "" {
		c.reasons = append(c.reasons, reason)
	}
	// A deny ends an agent-CLI chain at once; the remote-sandbox dialect
	// runs every handler and reports every deny reason.
	if v == Deny && c.ev.Kind == PreToolUse {
		c.stopped = true
	}
}

// add folds one handler's result in and returns its effect for the log
// line.
func (c *combiner) add(g *Group, h *Handler, res Result) string {
	kind := c.ev.Kind
	switch {
	case kind.isPost():
		return "ignored"
	case res.Outcome.Failed() && h.FailDeny && kind.IsPre():
		c.raise(Deny, fmt.Sprintf("hook group %q failed (%s: %s) and is configured with on_failure deny",
			g.Name, res.Outcome, res.Detail))
		return "fail-closed"
	case res.Outcome.Failed():
		return "fail-open"
	}
	a := res.answer
	switch {
	case kind.IsPre():
		reason := a.reason
		if a.verdict == Deny && reason == "" {
			reason = fmt.Sprintf("denied by hook group %q", g.Name)
		}
		c.raise(a.verdict, reason)
		if a.verdict != Deny {
			c.rewrite(a.overwrite)
		}
		for _, p := range a.permissionOverrides {
			if !slices.Contains(c.perms, p) {
				c.perms = append(c.perms, p)
			}
		}
		return string(a.verdict)
	case kind == Stop:
		if a.verdict == Continue {
			c.cont = true
			if a.reason != "" {
				c.contWhy = append(c.contWhy, a.reason)
			}
		}
		return string(a.verdict)
	}
	c.steps = append(c.steps, a.injectSteps...)
	if terminationRank(a.termination) > terminationRank(c.term) {
		c.term = a.termination
	}
	return "applied"
}

// rewrite merges an overwrite into the args later handlers see.
func (c *combiner) rewrite(over []rawMember) {
	if len(over) == 0 {
		return
	}
	d := c.ev.Kind.Dialect()
	p, err := withArgs(c.payloads[d], d, over)
	if err != nil {
		return // a tool event's payload always has its call: unreachable
	}
	c.overwrite = mergeMembers(c.overwrite, over)
	c.payloads = map[Dialect][]byte{d: p}
}

// decision is the combined Decision, in the caller's dialect.
func (c *combiner) decision(results []Result) Decision {
	d := Decision{Kind: c.ev.Kind, Decision: Allow, Results: results}
	switch {
	case c.ev.Kind.IsPre():
		d.Decision = c.level
		d.Reason = strings.Join(c.reasons, "; ")
		if len(c.overwrite) > 0 {
			d.Overwrite = encodeObject(c.overwrite)
			for _, m := range c.overwrite {
				d.OverwrittenKeys = append(d.OverwrittenKeys, m.key)
			}
		}
		d.PermissionOverrides = c.perms
		if c.ev.Kind == PreToolExecution {
			c.toRemote(&d)
		}
	case c.ev.Kind == Stop:
		d.Decision = StopNow
		if c.cont {
			d.Decision, d.Reason = Continue, strings.Join(c.contWhy, "; ")
		}
	default:
		d.InjectSteps, d.TerminationBehavior = c.steps, c.term
	}
	return d
}

// toRemote maps an agent-CLI verdict onto the remote-sandbox dialect's
// allow/deny. A remote runtime cannot ask anyone, so every verdict that
// needs an approval (ask, force_ask, deny_unless_prior_grant) denies;
// auto_approve allows. Only a deny carries its reasons, as before.
func (c *combiner) toRemote(d *Decision) {
	switch d.Decision {
	case Allow, AutoApprove:
		d.Decision, d.Reason = Allow, ""
	case Deny:
	default:
		why := d.Reason
		if why == "" {
			why = "a hook asked for approval"
		}
		d.Reason = fmt.Sprintf("%s (%s: no approval is possible on %s)", why, d.Decision, PreToolExecution)
		d.Decision = Deny
	}
	d.PermissionOverrides = nil
}
