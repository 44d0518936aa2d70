package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The hook side of a policy: reading a pre-tool hook event of either agent
// dialect, and answering an ask in the dialect that has none. The HTTP
// decision service and the in-process hook handler both use it, so the two
// give the same decision for the same event.

// NeedsApproval is the reason of an ask denied in the dialect without ask.
const NeedsApproval = "needs approval"

// Call keys: where each dialect's event holds the tool call.
const (
	RemoteCallKey = "tool_call"
	CLICallKey    = "toolCall"
)

// EventInput reads a hook event (JSON) whose tool call sits under callKey
// (RemoteCallKey or CLICallKey): the tool's name and arguments, and the
// whole event.
func EventInput(body []byte, callKey string) (Input, error) {
	var in Input
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in.Event); err != nil || in.Event == nil {
		return in, errors.New("the event is not a JSON object")
	}
	if dec.More() {
		return in, errors.New("the event has data after its JSON object")
	}
	call, ok := in.Event[callKey].(map[string]any)
	if !ok {
		return in, fmt.Errorf("the event has no %q object", callKey)
	}
	if in.Tool, ok = call["name"].(string); !ok || in.Tool == "" {
		return in, fmt.Errorf("the event's %s.name is missing or not a string", callKey)
	}
	switch args := call["args"].(type) {
	case map[string]any:
		in.Args = args
	case nil:
	default:
		return in, fmt.Errorf("the event's %s.args is not an object", callKey)
	}
	return in, nil
}

// ApproverPost delivers one question to an approver: it POSTs body (the
// hook event) to url with headers, waiting at most timeout, and returns the
// answer's body; or, when no answer came, a short word for what went wrong
// (timeout, connect-error, http-status, ...).
type ApproverPost func(ctx context.Context, url string, headers map[string]string, body []byte, timeout time.Duration) (answer []byte, failure string)

// ApproverRuleHeader tells the approver which rule asked (file:line).
const ApproverRuleHeader = "X-Hookgate-Policy-Rule"

// Approve turns an ask into the approver's allow or deny, for the dialect
// that has no ask. event is the hook event, passed on as it came. Without
// an approver (in the policy, or post nil), or on anything but a
// well-formed answer from it, the ask is a deny "needs approval": an ask
// never fails open. The second result says what the approver did: none,
// allow, deny, bad-response or post's failure word.
func (p *Policy) Approve(ctx context.Context, d Decision, event []byte, post ApproverPost) (Decision, string) {
	if d.Action != Ask {
		return d, ""
	}
	needs := NeedsApproval
	if d.Reason != "" {
		needs += ": " + d.Reason
	}
	deny := func(outcome string) (Decision, string) {
		d.Action, d.Reason = Deny, needs
		return d, outcome
	}
	if p.approver == "" || post == nil {
		return deny("none")
	}
	body, failure := post(ctx, p.approver, map[string]string{ApproverRuleHeader: d.Rule.Pos()}, event, p.approverTimeout)
	if failure != "" {
		return deny(failure)
	}
	var a struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	if json.Unmarshal(body, &a) != nil {
		return deny("bad-response")
	}
	switch a.Decision {
	case "allow":
		d.Action, d.Reason = Allow, "approved by the approver"
		return d, "allow"
	case "deny":
		d.Action, d.Reason = Deny, a.Reason
		if d.Reason == "" {
			d.Reason = "denied by the approver"
		}
		return d, "deny"
	}
	return deny("bad-response")
}

// AnswerJSON is the decision as a pre-tool hook's answer, one line:
// {"decision": "allow"|"ask"|"deny", "reason": ...}. In the dialect without
// ask, pass the decision through Approve first.
func (d Decision) AnswerJSON() []byte {
	if d.Reason == "" {
		return []byte(`{"decision":"` + string(d.Action) + "\"}\n")
	}
	b, _ := json.Marshal(struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}{string(d.Action), d.Reason})
	return append(b, '\n')
}
