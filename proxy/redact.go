package proxy

import (
	"sync/atomic"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// redactor scrubs the free text of decision records (reason, host, SNI,
// method) with the secrets of the policy in force. Reasons are built never
// to quote what a peer sent; this is the defence behind that, for the one
// that slips through. The scrubber is built once per policy generation.
type redactor struct {
	policy func() *config.Policy
	cache  atomic.Pointer[policyScrubber]
}

// policyScrubber is the text scrubber of one policy.
type policyScrubber struct {
	policy *config.Policy
	text   *transform.TextScrubber
}

// scrubber returns the text scrubber of the policy in force; nil (which
// changes nothing) when it injects no secrets or r is nil.
func (r *redactor) scrubber() *transform.TextScrubber {
	if r == nil || r.policy == nil {
		return nil
	}
	p := r.policy()
	if c := r.cache.Load(); c != nil && c.policy == p {
		return c.text
	}
	c := &policyScrubber{policy: p, text: textScrubber(p)}
	r.cache.Store(c)
	return c.text
}

// record scrubs the free-text fields of a decision record.
func (r *redactor) record(rec Record) Record {
	ts := r.scrubber()
	if ts == nil {
		return rec
	}
	rec.Reason = ts.Text(rec.Reason)
	rec.Host = ts.Text(rec.Host)
	rec.SNI = ts.Text(rec.SNI)
	rec.Method = ts.Text(rec.Method)
	return rec
}

// textScrubber builds the scrubber of every secret the policy injects,
// its tenants' included.
func textScrubber(p *config.Policy) *transform.TextScrubber {
	if p == nil {
		return nil
	}
	rules := make([]*transform.Rules, 0, len(p.Entries))
	for _, e := range p.Entries {
		rules = append(rules, e.Transform)
	}
	for _, t := range p.Tenants.List() {
		for _, e := range t.Policy.Entries {
			rules = append(rules, e.Transform)
		}
	}
	return transform.NewTextScrubber(rules...)
}

// Redact scrubs free text (an error, a reason) with the secrets of the
// policy in force and their encoded forms, for callers outside the proxy
// that serve what it decided (the admin API).
func (s *Server) Redact(text string) string { return s.sink.redact.scrubber().Text(text) }
