package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/hookgate/hookgate/hookhttp"
)

// Handler kinds in one place: what hooks.json fields each kind takes
// (kindOf, used by the loader) and how it is run (Runner.invoke). A new
// kind adds a HandlerType constant, a case to handlerTypes and kindOf, a
// case to the loader's field switch for its own fields, and a case to
// invoke; the rest of the runtime (matching, dialects, combining answers,
// logging) does not change.

// handlerKind describes one handler type of hooks.json.
type handlerKind struct {
	// fields are the kind's own fields, besides the common type, timeout
	// and on_failure.
	fields []string
	// required is the field without which the handler cannot run.
	required string
	// failDeny makes the kind's failures deny unless "on_failure" says
	// allow: a policy exists to deny, so a broken one must not allow.
	failDeny bool
}

// handlerTypes lists the handler types hooks.json accepts.
func handlerTypes() []HandlerType { return []HandlerType{CommandHandler, HTTPHandler, PolicyHandler} }

// kindOf describes handler type t; false when there is no such type.
func kindOf(t HandlerType) (handlerKind, bool) {
	switch t {
	case CommandHandler:
		return handlerKind{fields: []string{"command"}, required: "command"}, true
	case HTTPHandler:
		return handlerKind{fields: []string{"url", "headers"}, required: "url"}, true
	case PolicyHandler:
		return handlerKind{fields: []string{"file"}, required: "file", failDeny: true}, true
	}
	return handlerKind{}, false
}

// handlerKindOf returns the type whose own fields include field, or "".
func handlerKindOf(field string) (HandlerType, handlerKind) {
	for _, t := range handlerTypes() {
		k, _ := kindOf(t)
		if slices.Contains(k.fields, field) {
			return t, k
		}
	}
	return "", handlerKind{}
}

// invocation is what a handler is run with.
type invocation struct {
	payload []byte    // the event, in the handler's dialect
	kind    EventKind // the event, as the handler's dialect names it
	dir     string    // where a command runs
	idemKey string    // the Idempotency-Key of an HTTP POST
}

// invokeFailure is a handler run that produced no answer; zero when the
// handler answered (its output is then parsed as an answer).
type invokeFailure struct {
	outcome  Outcome
	detail   string
	timedOut bool   // the detail is a suffix to the timeout's cause
	stderr   string // tail of a command's stderr, failed or not
	// policy is a policy handler's decision, for the log line. (A policy
	// handler with nothing to decide, on an event that is not a pre-tool
	// one, sets a non-failure outcome above instead of answering.)
	policy *policyResult
}

// invoke runs handler h on one event and returns its raw answer.
func (r *Runner) invoke(ctx context.Context, h *Handler, in invocation) ([]byte, invokeFailure) {
	switch h.Type {
	case CommandHandler:
		env := r.opts.Env
		if env == nil {
			env = os.Environ()
		}
		cr := runCommand(ctx, h.Command, in.dir, env, in.payload, r.opts.KillGrace)
		f := invokeFailure{outcome: cr.outcome, detail: cr.detail, stderr: tail(cr.stderr, 1024)}
		if cr.timedOut {
			f.timedOut, f.detail = true, "; process group killed"
		}
		return cr.stdout, f
	case HTTPHandler:
		if r.opts.HTTP == nil {
			return nil, invokeFailure{outcome: OutcomeSpawnError, detail: "no HTTP client configured"}
		}
		resp, err := r.opts.HTTP.Post(ctx, h.URL, h.Headers, in.idemKey, in.payload, 0)
		if err == nil {
			return resp.Body, invokeFailure{}
		}
		var he *hookhttp.Error
		if !errors.As(err, &he) {
			return nil, invokeFailure{outcome: OutcomeConnectError, detail: err.Error()}
		}
		f := invokeFailure{outcome: Outcome(he.Kind), detail: he.Detail}
		if he.Kind == hookhttp.KindTimeout {
			f.timedOut, f.detail = true, ""
		}
		if he.Attempts > 1 {
			f.detail += fmt.Sprintf(" (after %d attempts)", he.Attempts)
		}
		return nil, f
	case PolicyHandler:
		return r.decidePolicy(ctx, h, in.kind, in.payload)
	}
	return nil, invokeFailure{outcome: OutcomeSpawnError, detail: fmt.Sprintf("unknown handler type %q", h.Type)}
}
