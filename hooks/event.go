package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Dialect is the format of a hooks.json file and of the payloads its
// handlers receive and answer.
type Dialect string

const (
	// DialectRemote is the remote-sandbox format: pre_tool_execution and
	// post_tool_execution, snake_case payloads, allow/deny answers.
	DialectRemote Dialect = "remote-sandbox"
	// DialectCLI is the agent-CLI format: SessionStart, PreToolUse,
	// PostToolUse, PreInvocation, PostInvocation and Stop, camelCase
	// payloads, richer answers.
	DialectCLI Dialect = "agent-cli"
)

// EventKind is a hook event: when, relative to the agent's work, hooks run.
type EventKind string

const (
	// PreToolExecution runs before the tool; its hooks can deny the call.
	PreToolExecution EventKind = "pre_tool_execution"
	// PostToolExecution runs after the tool; its hooks' output is ignored.
	PostToolExecution EventKind = "post_tool_execution"

	// SessionStart runs once when an agent-CLI conversation starts.
	SessionStart EventKind = "SessionStart"
	// PreToolUse runs before a tool; its hooks decide how the call is gated.
	PreToolUse EventKind = "PreToolUse"
	// PostToolUse runs after a tool; its hooks' output is ignored.
	PostToolUse EventKind = "PostToolUse"
	// PreInvocation runs before the model is called.
	PreInvocation EventKind = "PreInvocation"
	// PostInvocation runs after each model invocation.
	PostInvocation EventKind = "PostInvocation"
	// Stop runs when the execution loop ends; a hook may make it continue.
	Stop EventKind = "Stop"
)

// EventKinds lists every event of both dialects: the remote-sandbox
// dialect's, then the agent-CLI dialect's in the order they happen.
func EventKinds() []EventKind {
	return []EventKind{PreToolExecution, PostToolExecution, SessionStart, PreToolUse, PostToolUse, PreInvocation, PostInvocation, Stop}
}

// Dialect is the dialect that names this event.
func (k EventKind) Dialect() Dialect {
	if k == PreToolExecution || k == PostToolExecution {
		return DialectRemote
	}
	return DialectCLI
}

// In is this event's name in dialect d, or "" when d has no such event
// (the remote-sandbox dialect has no SessionStart, ...).
func (k EventKind) In(d Dialect) EventKind {
	if k.Dialect() == d {
		return k
	}
	switch k {
	case PreToolExecution:
		return PreToolUse
	case PostToolExecution:
		return PostToolUse
	case PreToolUse:
		return PreToolExecution
	case PostToolUse:
		return PostToolExecution
	}
	return ""
}

// IsPre reports whether the event gates a tool call (pre_tool_execution,
// PreToolUse): only its hooks can deny.
func (k EventKind) IsPre() bool { return k == PreToolExecution || k == PreToolUse }

// isPost reports whether the event follows a tool call: its output is
// ignored.
func (k EventKind) isPost() bool { return k == PostToolExecution || k == PostToolUse }

// HasTool reports whether the event is about a tool call (and so has a
// tool name that matchers see).
func (k EventKind) HasTool() bool { return k.IsPre() || k.isPost() }

// ruleBased reports whether the event's hooks are {matcher, hooks} rules
// rather than a plain list of handlers.
func (k EventKind) ruleBased() bool { return k.HasTool() }

// ParseEventKind accepts the event names of both dialects.
func ParseEventKind(s string) (EventKind, error) {
	kinds := EventKinds()
	for _, k := range kinds {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	hint := ""
	for _, k := range kinds {
		if strings.EqualFold(string(k), s) {
			hint = fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	return "", fmt.Errorf("unknown event %q%s (want one of %s)", s, hint, strings.Join(names, ", "))
}

// payloadKeys are the top-level member names that differ between the
// dialects' payloads; the rest passes through unchanged.
type payloadKeys struct{ call, env string }

func keysOf(d Dialect) payloadKeys {
	if d == DialectCLI {
		return payloadKeys{call: "toolCall", env: "conversationId"}
	}
	return payloadKeys{call: "tool_call", env: "environment_id"}
}

// Event is one event presented to the hooks. Payload is the caller's JSON,
// in the dialect of Kind; the runner passes it through unchanged, except
// that each handler gets it in its own file's dialect (see convertPayload)
// and a PreToolUse "overwrite" rewrites the tool's args for later handlers.
type Event struct {
	Kind    EventKind
	Tool    string // the tool call's name, what matchers see; "" for events without a tool
	Payload []byte
}

// NewEvent builds a tool event (pre_tool_execution, post_tool_execution,
// PreToolUse, PostToolUse). toolErr is the post event's "error" (the
// tool's failure text); empty omits it. args may be nil (sent as {}).
// environmentID is "environment_id", or "conversationId" in the agent-CLI
// dialect; empty omits it.
func NewEvent(kind EventKind, tool string, args json.RawMessage, environmentID, toolErr string) (Event, error) {
	if tool == "" {
		return Event{}, errors.New("event: empty tool name")
	}
	if !kind.HasTool() {
		return Event{}, fmt.Errorf("event: %s is not a tool event; use ParseEvent", kind)
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	call, err := json.Marshal(struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}{tool, args})
	if err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	keys := keysOf(kind.Dialect())
	members := []rawMember{{key: keys.call, val: call}}
	if environmentID != "" {
		id, _ := json.Marshal(environmentID)
		members = append(members, rawMember{key: keys.env, val: id})
	}
	if toolErr != "" {
		e, _ := json.Marshal(toolErr)
		members = append(members, rawMember{key: "error", val: e})
	}
	return Event{Kind: kind, Tool: tool, Payload: encodeObject(members)}, nil
}

// ParseEvent reads an event's JSON (as `gateway hooks run` gets it on
// stdin), in the dialect of kind. The input must be an object; a tool
// event's must hold a "tool_call" ("toolCall" in the agent-CLI dialect)
// object whose "name" is a non-empty string. Everything else passes through
// unchanged. When the input has no "environment_id" ("conversationId") and
// environmentID is not empty, it is added.
func ParseEvent(kind EventKind, data []byte, environmentID string) (Event, error) {
	if _, err := ParseEventKind(string(kind)); err != nil {
		return Event{}, err
	}
	data = bytes.TrimSpace(data)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		if err == nil {
			err = errors.New("null")
		}
		return Event{}, fmt.Errorf("event: not a JSON object: %v", err)
	}
	keys := keysOf(kind.Dialect())
	var name string
	if kind.HasTool() {
		rawCall, ok := top[keys.call]
		if !ok {
			other := keysOf(otherDialect(kind.Dialect())).call
			if _, has := top[other]; has {
				return Event{}, fmt.Errorf("event: missing %q (the payload has %q: %s events use %q)", keys.call, other, kind, keys.call)
			}
			return Event{}, fmt.Errorf("event: missing %q", keys.call)
		}
		var call map[string]json.RawMessage
		if err := json.Unmarshal(rawCall, &call); err != nil || call == nil {
			return Event{}, fmt.Errorf("event: %q is not an object", keys.call)
		}
		if err := json.Unmarshal(call["name"], &name); err != nil || name == "" {
			return Event{}, fmt.Errorf("event: %q must be a non-empty string", keys.call+".name")
		}
	}
	if _, has := top[keys.env]; !has && environmentID != "" {
		id, _ := json.Marshal(environmentID)
		// Append the member before the closing brace, leaving the rest of
		// the caller's bytes as they were.
		i := bytes.LastIndexByte(data, '}')
		out := make([]byte, 0, len(data)+len(id)+20)
		out = append(out, data[:i]...)
		if len(top) > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, keys.env...)
		out = append(out, `":`...)
		out = append(out, id...)
		out = append(out, data[i:]...)
		data = out
	}
	return Event{Kind: kind, Tool: name, Payload: data}, nil
}

func otherDialect(d Dialect) Dialect {
	if d == DialectCLI {
		return DialectRemote
	}
	return DialectCLI
}

// excerpt quotes the start of b for a log detail.
func excerpt(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return fmt.Sprintf("%q", strings.ToValidUTF8(s, "?"))
}
