package policy

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Action is what a decision tells the agent to do with a tool call.
type Action string

const (
	Allow Action = "allow"
	Ask   Action = "ask"
	Deny  Action = "deny"
)

// Level is a rule's priority, 0 (tool deny) to 8 ("*" allow); lower wins.
// LevelDefault stands for the file's default when no rule matched.
type Level int

const (
	LevelToolDeny Level = iota
	LevelToolAsk
	LevelToolAllow
	LevelPrefixDeny
	LevelPrefixAsk
	LevelPrefixAllow
	LevelAnyDeny
	LevelAnyAsk
	LevelAnyAllow
	LevelDefault
)

// Specificity is what a rule names: one tool, a prefix or every tool.
type Specificity int

const (
	SpecTool Specificity = iota
	SpecPrefix
	SpecAny
)

func (s Specificity) String() string {
	return [...]string{"tool", "prefix", "*"}[s]
}

// levelOf places a rule among the nine levels.
func levelOf(s Specificity, a Action) Level {
	offset := map[Action]Level{Deny: 0, Ask: 1, Allow: 2}[a]
	return Level(int(s)*3) + offset
}

// String names a level as "tool deny", "prefix ask", "* allow" or "default".
func (l Level) String() string {
	if l < 0 || l > LevelDefault {
		return fmt.Sprintf("level(%d)", int(l))
	}
	if l == LevelDefault {
		return "default"
	}
	return Specificity(l/3).String() + " " + string([...]Action{Deny, Ask, Allow}[l%3])
}

// Rule names the rule that took a decision: where it is written and its
// level. For a default decision Line is 0 and Level is LevelDefault.
type Rule struct {
	File  string
	Line  int
	Level Level
	// Source says which entry of the file the rule comes from:
	// "rules[3]" or "presets[0] confirm_run_command".
	Source string
}

// Pos is "file:line", or the file alone for the default.
func (r Rule) Pos() string {
	if r.Line == 0 {
		return r.File
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

// Input is one tool call to decide on.
type Input struct {
	Tool string
	// Args are the tool's arguments as decoded JSON (nil counts as {}).
	Args map[string]any
	// Event is the whole hook event as decoded JSON, in its own dialect
	// (nil counts as {}).
	Event map[string]any
}

// Decision is the answer for one tool call.
type Decision struct {
	Action Action
	Reason string
	Rule   Rule
	// Err is set when the decision is a fail-closed deny: a predicate could
	// not be evaluated. Reason then carries its text.
	Err error
}

// Step is one predicate evaluated while deciding, for explanations.
type Step struct {
	Rule   Rule
	Action Action
	When   string
	// Result is "true", "false" or "error: ...".
	Result string
}

// Policy is a loaded policy file. It is immutable and safe for concurrent
// use.
type Policy struct {
	file     string
	fallback Action
	rules    []*rule // every rule, by level then file order

	// Indexes of rules by what they name, each in (level, order) order:
	// tool rules by tool name, prefix rules by prefix (prefixLens lists
	// the distinct prefix lengths, ascending), and "*" rules.
	byTool     map[string][]*rule
	byPrefix   map[string][]*rule
	prefixLens []int
	anyTool    []*rule

	approver        string
	approverTimeout time.Duration
}

// rule is one compiled rule. A rule naming several tools appears under
// each of them in byTool.
type rule struct {
	ref    Rule
	action Action
	spec   Specificity
	tools  []string // SpecTool
	prefix string   // SpecPrefix
	when   predicate
	reason string
	order  int
}

// File is the policy file's name as given to Load.
func (p *Policy) File() string { return p.file }

// Default is the action taken when no rule matches.
func (p *Policy) Default() Action { return p.fallback }

// Approver is the URL that answers asks in the dialect without ask, or "".
func (p *Policy) Approver() string { return p.approver }

// ApproverTimeout bounds one question to the approver.
func (p *Policy) ApproverTimeout() time.Duration { return p.approverTimeout }

// Decide returns the decision for one tool call. ctx is accepted for the
// callers' sake; evaluation is bounded by CEL's cost limit, not by time.
func (p *Policy) Decide(ctx context.Context, in Input) Decision {
	return p.decide(in, nil)
}

// Explain is Decide that also returns every predicate it evaluated, in
// order, with its value.
func (p *Policy) Explain(ctx context.Context, in Input) (Decision, []Step) {
	var steps []Step
	d := p.decide(in, &steps)
	return d, steps
}

func (p *Policy) decide(in Input, steps *[]Step) Decision {
	act := newActivation(in)
	for _, r := range p.byTool[in.Tool] {
		if d, ok := p.try(r, act, steps); ok {
			return d
		}
	}
	if len(p.prefixLens) > 0 {
		var buf [8]*rule
		matched := buf[:0]
		for _, n := range p.prefixLens {
			if n > len(in.Tool) {
				break
			}
			matched = append(matched, p.byPrefix[in.Tool[:n]]...)
		}
		slices.SortFunc(matched, byLevelThenOrder)
		for _, r := range matched {
			if d, ok := p.try(r, act, steps); ok {
				return d
			}
		}
	}
	for _, r := range p.anyTool {
		if d, ok := p.try(r, act, steps); ok {
			return d
		}
	}
	d := Decision{Action: p.fallback, Rule: Rule{File: p.file, Level: LevelDefault, Source: "default"}}
	if d.Action == Deny {
		d.Reason = "no policy rule allows " + quoteTool(in.Tool) + " (default deny)"
	}
	return d
}

// try evaluates one rule: ok when it decides (it matched, or its predicate
// failed, which denies).
func (p *Policy) try(r *rule, act *activation, steps *[]Step) (Decision, bool) {
	if r.when != nil {
		match, err := r.when.eval(act)
		if steps != nil {
			*steps = append(*steps, Step{Rule: r.ref, Action: r.action, When: r.when.text(), Result: stepResult(match, err)})
		}
		if err != nil {
			return Decision{
				Action: Deny,
				Reason: fmt.Sprintf("policy error in the rule at %s: %v", r.ref.Pos(), err),
				Rule:   r.ref,
				Err:    err,
			}, true
		}
		if !match {
			return Decision{}, false
		}
	}
	return Decision{Action: r.action, Reason: r.reasonFor(act.in.Tool), Rule: r.ref}, true
}

func stepResult(match bool, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprint(match)
}

// reasonFor is the rule's own reason, or one naming the rule for deny and
// ask (an allow needs none).
func (r *rule) reasonFor(tool string) string {
	if r.reason != "" || r.action == Allow {
		return r.reason
	}
	verb := "denied"
	if r.action == Ask {
		verb = "needs approval"
	}
	return fmt.Sprintf("%s %s by the policy rule at %s (%s)", quoteTool(tool), verb, r.ref.Pos(), r.ref.Level)
}

// quoteTool quotes a tool name for a reason, cut to a sane length: the
// name comes from the caller.
func quoteTool(t string) string {
	const maxShown = 128
	if len(t) > maxShown {
		return fmt.Sprintf("%q...", t[:maxShown])
	}
	return fmt.Sprintf("%q", t)
}

func byLevelThenOrder(a, b *rule) int {
	if a.ref.Level != b.ref.Level {
		return int(a.ref.Level) - int(b.ref.Level)
	}
	return a.order - b.order
}
