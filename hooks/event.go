package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// EventKind is a hook event: when, relative to the tool call, hooks run.
type EventKind string

const (
	// PreToolExecution runs before the tool; its hooks can deny the call.
	PreToolExecution EventKind = "pre_tool_execution"
	// PostToolExecution runs after the tool; its hooks' output is ignored.
	PostToolExecution EventKind = "post_tool_execution"
)

// ParseEventKind accepts the two event names of hooks.json.
func ParseEventKind(s string) (EventKind, error) {
	switch k := EventKind(s); k {
	case PreToolExecution, PostToolExecution:
		return k, nil
	}
	return "", fmt.Errorf("unknown event %q (want %s or %s)", s, PreToolExecution, PostToolExecution)
}

// Event is one tool call presented to the hooks. Payload is the exact JSON
// every handler receives (stdin of a command, body of an HTTP POST):
// {"tool_call": {"name", "args"}, "environment_id", ["error"]}. The runner
// passes it through unchanged, whatever args hold.
type Event struct {
	Kind    EventKind
	Tool    string // tool_call.name, what matchers see
	Payload []byte
}

// NewEvent builds an event. toolErr is the post event's "error" (the tool's
// failure text); empty omits it. args may be nil (sent as {}).
func NewEvent(kind EventKind, tool string, args json.RawMessage, environmentID, toolErr string) (Event, error) {
	if tool == "" {
		return Event{}, errors.New("event: empty tool name")
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	payload := struct {
		ToolCall struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"tool_call"`
		EnvironmentID string `json:"environment_id,omitempty"`
		Error         string `json:"error,omitempty"`
	}{EnvironmentID: environmentID, Error: toolErr}
	payload.ToolCall.Name = tool
	payload.ToolCall.Args = args
	data, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	return Event{Kind: kind, Tool: tool, Payload: data}, nil
}

// ParseEvent reads an event's JSON (as `gateway hooks run` gets it on
// stdin). The input must be an object with a "tool_call" object whose
// "name" is a non-empty string; everything else passes through unchanged.
// When the input has no "environment_id" and environmentID is not empty,
// it is added.
func ParseEvent(kind EventKind, data []byte, environmentID string) (Event, error) {
	data = bytes.TrimSpace(data)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		if err == nil {
			err = errors.New("null")
		}
		return Event{}, fmt.Errorf("event: not a JSON object: %v", err)
	}
	rawCall, ok := top["tool_call"]
	if !ok {
		return Event{}, errors.New(`event: missing "tool_call"`)
	}
	var call map[string]json.RawMessage
	if err := json.Unmarshal(rawCall, &call); err != nil || call == nil {
		return Event{}, errors.New(`event: "tool_call" is not an object`)
	}
	var name string
	if err := json.Unmarshal(call["name"], &name); err != nil || name == "" {
		return Event{}, errors.New(`event: "tool_call.name" must be a non-empty string`)
	}
	if _, has := top["environment_id"]; !has && environmentID != "" {
		id, _ := json.Marshal(environmentID)
		// Append the member before the closing brace, leaving the rest of
		// the caller's bytes as they were.
		i := bytes.LastIndexByte(data, '}')
		out := make([]byte, 0, len(data)+len(id)+20)
		out = append(out, data[:i]...)
		out = append(out, `,"environment_id":`...)
		out = append(out, id...)
		out = append(out, data[i:]...)
		data = out
	}
	if _, err := ParseEventKind(string(kind)); err != nil {
		return Event{}, err
	}
	return Event{Kind: kind, Tool: name, Payload: data}, nil
}

// Verdict is the answer of a hook chain.
type Verdict string

const (
	Allow Verdict = "allow"
	Deny  Verdict = "deny"
)

// Decision is the outcome of running an event's hooks. Its JSON form is the
// decision JSON of hooks.json handlers: {"decision": "allow"} or
// {"decision": "deny", "reason": "..."}.
type Decision struct {
	Decision Verdict `json:"decision"`
	Reason   string  `json:"reason,omitempty"`
	// Results has one entry per handler that matched, in run order.
	Results []Result `json:"-"`
}

// Denied reports whether the tool call must not run.
func (d Decision) Denied() bool { return d.Decision == Deny }

// Outcome is what one handler did. Only OutcomeAllow and OutcomeDeny are
// answers; the rest are failures, which count as allow unless the handler
// says "on_failure": "deny".
type Outcome string

const (
	OutcomeAllow        Outcome = "allow"
	OutcomeDeny         Outcome = "deny"
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
func (o Outcome) Failed() bool { return o != OutcomeAllow && o != OutcomeDeny }

// parseDecision reads a handler's answer. Only a JSON object whose
// "decision" is "allow" or "deny" (with an optional string "reason") is an
// answer; empty output, plain text, other JSON, or a malformed decision is
// a bad-response failure whose detail says what was wrong.
func parseDecision(out []byte) (Outcome, string) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return OutcomeBadResponse, "empty output"
	}
	var d struct {
		Decision *string         `json:"decision"`
		Reason   json.RawMessage `json:"reason"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&d); err != nil {
		return OutcomeBadResponse, "not a JSON object: " + excerpt(out, 80)
	}
	if dec.More() {
		return OutcomeBadResponse, "trailing data after the JSON object: " + excerpt(out, 80)
	}
	if d.Decision == nil {
		return OutcomeBadResponse, `no "decision" field: ` + excerpt(out, 80)
	}
	switch *d.Decision {
	case "allow":
		return OutcomeAllow, ""
	case "deny":
		var reason string
		if len(d.Reason) > 0 && string(d.Reason) != "null" {
			if err := json.Unmarshal(d.Reason, &reason); err != nil {
				return OutcomeBadResponse, `"reason" is not a string`
			}
		}
		return OutcomeDeny, reason
	}
	return OutcomeBadResponse, fmt.Sprintf(`"decision" is %q, want "allow" or "deny"`, *d.Decision)
}

// excerpt quotes the start of b for a log detail.
func excerpt(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return fmt.Sprintf("%q", strings.ToValidUTF8(s, "?"))
}
