package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Verdict is the answer of a hook chain to a tool call (pre events), or to
// a Stop event.
type Verdict string

// The verdicts of pre events, from the most to the least permissive. The
// remote-sandbox dialect knows only Allow and Deny.
const (
	Allow                Verdict = "allow"
	AutoApprove          Verdict = "auto_approve"
	Ask                  Verdict = "ask"
	ForceAsk             Verdict = "force_ask"
	DenyUnlessPriorGrant Verdict = "deny_unless_prior_grant"
	Deny                 Verdict = "deny"
)

// The verdicts of a Stop event.
const (
	Continue Verdict = "continue"
	StopNow  Verdict = "stop"
)

// strictness orders the pre-event verdicts; the strictest wins.
func (v Verdict) strictness() int {
	switch v {
	case AutoApprove:
		return 1
	case Ask:
		return 2
	case ForceAsk:
		return 3
	case DenyUnlessPriorGrant:
		return 4
	case Deny:
		return 5
	}
	return 0
}

// Termination behaviours of SessionStart, PreInvocation, PostInvocation,
// strongest last.
func terminationRank(behavior string) int {
	switch behavior {
	case "force_continue":
		return 1
	case "terminate":
		return 2
	}
	return 0
}

// Decision is the outcome of running an event's hooks, combined over every
// handler that ran, in order. Its JSON form (MarshalJSON) is the output of
// the event's dialect: {"decision": "allow"|"deny", "reason"} for
// pre_tool_execution; the agent-CLI output schema for the CLI events.
type Decision struct {
	// Kind is the event the decision answers.
	Kind EventKind
	// Decision is the verdict of a pre event (for pre_tool_execution only
	// Allow or Deny) or of a Stop event (Continue or StopNow); Allow for
	// the others.
	Decision Verdict
	// Reason joins the reasons of the winning verdict's answers, in order.
	Reason string
	// Overwrite is the merged PreToolUse "overwrite" of every handler (a
	// JSON object), nil when none rewrote the args; OverwrittenKeys names
	// its members.
	Overwrite       json.RawMessage
	OverwrittenKeys []string
	// PermissionOverrides are the handlers' lists, concatenated, without
	// duplicates.
	PermissionOverrides []string
	// InjectSteps are the steps of SessionStart, PreInvocation and
	// PostInvocation handlers, in order; TerminationBehavior the strongest
	// one asked for ("terminate" > "force_continue" > "").
	InjectSteps         []json.RawMessage
	TerminationBehavior string
	// Results has one entry per handler that ran, in run order.
	Results []Result
}

// Denied reports whether the tool call must not run.
func (d Decision) Denied() bool { return d.Decision == Deny }

// MarshalJSON writes the output of the decision's event, in the dialect of
// its caller.
func (d Decision) MarshalJSON() ([]byte, error) {
	steps := d.InjectSteps
	if steps == nil {
		steps = []json.RawMessage{}
	}
	switch d.Kind {
	case PreToolUse:
		return json.Marshal(struct {
			Decision            Verdict         `json:"decision"`
			Reason              string          `json:"reason,omitempty"`
			Overwrite           json.RawMessage `json:"overwrite,omitempty"`
			OverwrittenKeys     []string        `json:"overwrittenKeys,omitempty"`
			PermissionOverrides []string        `json:"permissionOverrides,omitempty"`
		}{d.Decision, d.Reason, d.Overwrite, d.OverwrittenKeys, d.PermissionOverrides})
	case PostToolUse:
		return []byte("{}"), nil
	case SessionStart:
		return json.Marshal(struct {
			InjectSteps []json.RawMessage `json:"injectSteps"`
		}{steps})
	case PreInvocation, PostInvocation:
		return json.Marshal(struct {
			InjectSteps         []json.RawMessage `json:"injectSteps"`
			TerminationBehavior string            `json:"terminationBehavior"`
		}{steps, d.TerminationBehavior})
	case Stop:
		return json.Marshal(struct {
			Decision Verdict `json:"decision"`
			Reason   string  `json:"reason,omitempty"`
		}{d.Decision, d.Reason})
	}
	// The remote-sandbox dialect. An agent-CLI handler's args rewrite is
	// passed on too, as an extension a remote runtime may ignore.
	return json.Marshal(struct {
		Decision  Verdict         `json:"decision"`
		Reason    string          `json:"reason,omitempty"`
		Overwrite json.RawMessage `json:"overwrite,omitempty"`
	}{d.Decision, d.Reason, d.Overwrite})
}

// Outcome is what one handler did: an answer (allow, deny, ask, ...,
// answered, continue, stop) or a failure (timeout, exit-status, ...).
// Failures count as no answer unless the handler says
// "on_failure": "deny".
type Outcome string

const (
	OutcomeAllow                Outcome = "allow"
	OutcomeDeny                 Outcome = "deny"
	OutcomeAutoApprove          Outcome = "auto_approve"
	OutcomeAsk                  Outcome = "ask"
	OutcomeForceAsk             Outcome = "force_ask"
	OutcomeDenyUnlessPriorGrant Outcome = "deny_unless_prior_grant"
	// OutcomeAnswered is a well-formed answer to SessionStart,
	// PreInvocation or PostInvocation.
	OutcomeAnswered Outcome = "answered"
	OutcomeContinue Outcome = "continue"
	OutcomeStop     Outcome = "stop"

	OutcomeTimeout      Outcome = "timeout"
	OutcomeExitStatus   Outcome = "exit-status"
	OutcomeSpawnError   Outcome = "spawn-error"
	OutcomeHTTPStatus   Outcome = "http-status"
	OutcomeConnectError Outcome = "connect-error"
	OutcomeBadResponse  Outcome = "bad-response"
	// OutcomeLoadError is a hooks.json that did not load (in whole or in
	// part); it is logged on every run, and denies in fail-closed mode.
	OutcomeLoadError Outcome = "load-error"
)

// Failed reports whether the outcome is a failure rather than an answer.
func (o Outcome) Failed() bool {
	switch o {
	case OutcomeAllow, OutcomeDeny, OutcomeAutoApprove, OutcomeAsk, OutcomeForceAsk,
		OutcomeDenyUnlessPriorGrant, OutcomeAnswered, OutcomeContinue, OutcomeStop:
		return false
	}
	return true
}

// answer is a handler's well-formed output, whatever its dialect.
type answer struct {
	verdict             Verdict // pre events and Stop
	reason              string
	overwrite           []rawMember
	permissionOverrides []string
	injectSteps         []json.RawMessage
	termination         string
}

// parseAnswer reads a handler's output to event kind (in the handler's
// dialect). A malformed answer is a bad-response failure whose detail says
// what was wrong.
func parseAnswer(kind EventKind, out []byte) (Outcome, string, answer) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return OutcomeBadResponse, "empty output", answer{}
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return OutcomeBadResponse, "not a JSON object: " + excerpt(out, 80), answer{}
	}
	if dec.More() {
		return OutcomeBadResponse, "trailing data after the JSON object: " + excerpt(out, 80), answer{}
	}
	p := answerParser{fields: fields}
	switch kind {
	case PreToolExecution:
		p.verdict(Allow, Deny)
		if p.a.verdict == Deny { // an allow's reason was never read
			p.reason()
		}
	case PreToolUse:
		p.verdict(Allow, AutoApprove, Ask, ForceAsk, DenyUnlessPriorGrant, Deny)
		p.reason()
		p.overwrite()
		p.permissionOverrides()
	case SessionStart:
		p.injectSteps()
	case PreInvocation:
		p.injectSteps()
		p.termination("terminate")
	case PostInvocation:
		p.injectSteps()
		p.termination("terminate", "force_continue")
	case Stop:
		p.stop()
		p.reason()
	}
	if p.problem != "" {
		return OutcomeBadResponse, p.problem, answer{}
	}
	switch {
	case kind.IsPre():
		return Outcome(p.a.verdict), "", p.a
	case kind == Stop:
		return Outcome(p.a.verdict), "", p.a
	}
	return OutcomeAnswered, "", p.a
}

// answerParser checks an answer's fields one by one; the first problem
// sticks.
type answerParser struct {
	fields  map[string]json.RawMessage
	a       answer
	problem string
}

func (p *answerParser) fail(format string, args ...any) {
	if p.problem == "" {
		p.problem = fmt.Sprintf(format, args...)
	}
}

// present returns the raw field, nil when absent or null.
func (p *answerParser) present(name string) json.RawMessage {
	raw := p.fields[name]
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// decision is the answer's "decision" string; false (the failure
// recorded) when it is missing or not a string.
func (p *answerParser) decision() (string, bool) {
	raw := p.present("decision")
	if raw == nil {
		p.fail(`no "decision" field`)
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.fail(`"decision" is not a string`)
		return "", false
	}
	return s, true
}

func (p *answerParser) verdict(allowed ...Verdict) {
	s, ok := p.decision()
	if !ok {
		return
	}
	if !slices.Contains(allowed, Verdict(s)) {
		names := make([]string, len(allowed))
		for i, v := range allowed {
			names[i] = fmt.Sprintf("%q", v)
		}
		p.fail(`"decision" is %q, want %s`, s, strings.Join(names, ", "))
		return
	}
	p.a.verdict = Verdict(s)
}

func (p *answerParser) stop() {
	s, ok := p.decision()
	if !ok {
		return
	}
	// Any value but "continue" lets the agent stop.
	p.a.verdict = StopNow
	if s == string(Continue) {
		p.a.verdict = Continue
	}
}

func (p *answerParser) reason() {
	if raw := p.present("reason"); raw != nil {
		if err := json.Unmarshal(raw, &p.a.reason); err != nil {
			p.fail(`"reason" is not a string`)
		}
	}
}

func (p *answerParser) overwrite() {
	raw := p.present("overwrite")
	if raw == nil {
		return
	}
	ms, err := objectMembers(raw)
	if err != nil {
		p.fail(`"overwrite" is not an object`)
		return
	}
	for i := range ms {
		var c bytes.Buffer
		if json.Compact(&c, ms[i].val) == nil {
			ms[i].val = c.Bytes()
		}
	}
	p.a.overwrite = ms
}

func (p *answerParser) permissionOverrides() {
	if raw := p.present("permissionOverrides"); raw != nil {
		if err := json.Unmarshal(raw, &p.a.permissionOverrides); err != nil {
			p.fail(`"permissionOverrides" is not a list of strings`)
		}
	}
}

// stepType returns the first byte of the JSON type of an inject step's
// value: '{' for systemMessage and errorMessage, '"' for userMessage and
// ephemeralMessage; 0 for anything else.
func stepType(kind string) byte {
	switch kind {
	case "systemMessage", "errorMessage":
		return '{'
	case "userMessage", "ephemeralMessage":
		return '"'
	}
	return 0
}

func (p *answerParser) injectSteps() {
	raw := p.present("injectSteps")
	if raw == nil {
		return
	}
	var steps []json.RawMessage
	if err := json.Unmarshal(raw, &steps); err != nil {
		p.fail(`"injectSteps" is not a list`)
		return
	}
	for i, s := range steps {
		if msg := checkStep(s); msg != "" {
			p.fail("injectSteps[%d]: %s", i, msg)
			return
		}
		var c bytes.Buffer
		if json.Compact(&c, s) == nil {
			steps[i] = c.Bytes()
		}
	}
	p.a.injectSteps = steps
}

// checkStep says what is wrong with an inject step, "" if nothing: it must
// be an object with exactly one of systemMessage (object), userMessage
// (string), ephemeralMessage (string) or errorMessage (object).
func checkStep(s json.RawMessage) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(s, &m); err != nil || m == nil {
		return "not an object"
	}
	if len(m) != 1 {
		return fmt.Sprintf("has %d fields, want exactly one of systemMessage, userMessage, ephemeralMessage, errorMessage", len(m))
	}
	for k, v := range m {
		want := stepType(k)
		if want == 0 {
			return fmt.Sprintf("unknown step %q, want systemMessage, userMessage, ephemeralMessage or errorMessage", k)
		}
		if len(v) == 0 || v[0] != want {
			typ := "an object"
			if want == '"' {
				typ = "a string"
			}
			return fmt.Sprintf("%q must be %s", k, typ)
		}
	}
	return ""
}

func (p *answerParser) termination(allowed ...string) {
	raw := p.present("terminationBehavior")
	if raw == nil {
		return
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.fail(`"terminationBehavior" is not a string`)
		return
	}
	if s != "" && !slices.Contains(allowed, s) {
		p.fail(`"terminationBehavior" is %q, want "" or %q`, s, strings.Join(allowed, `" or "`))
		return
	}
	p.a.termination = s
}
