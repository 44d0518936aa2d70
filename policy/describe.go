package policy

import (
	"fmt"
	"strings"

	"github.com/rs/zerolog"
)

// RuleInfo describes one loaded rule, for listings.
type RuleInfo struct {
	Rule   Rule
	Action Action
	// Target is what the rule names: a tool, "[a, b]", "prefix P" or "*".
	Target string
	When   string
	Reason string
}

// Rules lists every rule, by level then file order.
func (p *Policy) Rules() []RuleInfo {
	out := make([]RuleInfo, 0, len(p.rules))
	for _, r := range p.rules {
		info := RuleInfo{Rule: r.ref, Action: r.action, Reason: r.reason}
		switch r.spec {
		case SpecTool:
			info.Target = strings.Join(r.tools, ", ")
			if len(r.tools) > 1 {
				info.Target = "[" + info.Target + "]"
			}
		case SpecPrefix:
			info.Target = fmt.Sprintf("prefix %q", r.prefix)
		case SpecAny:
			info.Target = `"*"`
		}
		if r.when != nil {
			info.When = r.when.text()
		}
		out = append(out, info)
	}
	return out
}

// MarshalZerologObject writes the decision's log fields: the action, its
// reason, the policy file, the rule (file:line, or "default") and its
// level. Arguments are never logged: they may hold anything.
func (d Decision) MarshalZerologObject(e *zerolog.Event) {
	e.Str("decision", string(d.Action)).
		Str("policy", d.Rule.File).
		Str("rule", d.Rule.logPos()).
		Int("rule_level", int(d.Rule.Level)).
		Str("rule_kind", d.Rule.Level.String()).
		Str("rule_source", d.Rule.Source)
	if d.Reason != "" {
		e.Str("reason", d.Reason)
	}
	if d.Err != nil {
		e.Bool("fail_closed", true)
	}
}

// logPos is the rule's file:line, or "default".
func (r Rule) logPos() string {
	if r.Level == LevelDefault {
		return "default"
	}
	return r.Pos()
}
