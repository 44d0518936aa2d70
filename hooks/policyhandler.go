package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hookgate/hookgate/internal/srcpos"
	"github.com/hookgate/hookgate/policy"
)

// The policy handler: {"type": "policy", "file": "policy.yaml"} decides
// pre-tool events in process with a declarative policy (package policy),
// no subprocess and no HTTP. It gates only pre_tool_execution and
// PreToolUse; on every other event it does nothing.

// loadedPolicy is one policy file, loaded once per Load (and per Runner):
// the policy, or why it could not be loaded.
type loadedPolicy struct {
	policy *policy.Policy
	err    error
}

// policyCache holds the policy files a Load has read, by path.
type policyCache map[string]*loadedPolicy

// policyFile compiles a policy handler's "file": a path relative to the
// hooks.json's directory unless absolute. The policy is loaded now, so its
// errors are reported with the file's other problems; a policy that does
// not load makes the handler deny every pre-tool call, naming the error.
func (c *fileCompiler) policyFile(h *Handler, field string, n *node) bool {
	if n.kind != kindString || strings.TrimSpace(n.str) == "" {
		c.errorf(n.off, field, "must be a non-empty string: the policy file, relative to this hooks.json's directory")
		return false
	}
	file := n.str
	if !filepath.IsAbs(file) {
		file = filepath.Join(filepath.Dir(c.path), file)
	}
	h.PolicyFile = file
	lp, seen := c.policies[file]
	if !seen {
		lp = loadPolicy(file)
		c.policies[file] = lp
		// The policy's own problems, once per file, each at its file:line.
		var pe srcpos.Errors
		if errors.As(lp.err, &pe) {
			for _, e := range pe {
				e := *e
				if e.Severity == "" {
					e.Severity = srcpos.SeverityError
				}
				c.problems = append(c.problems, &e)
			}
		}
	}
	h.policy = lp
	if lp.err != nil {
		c.problem(srcpos.SeverityError, n.off, field,
			fmt.Sprintf("policy %s did not load (%s); this handler denies every pre-tool call until it does", file, problemCount(lp.err)),
			"fix the policy's problems; `gateway policy check "+file+"` lists them")
	}
	return true
}

// loadPolicy loads a policy file. Only a regular file is opened: a
// hooks.json naming a FIFO or a device must not hang or feed the loader.
func loadPolicy(file string) *loadedPolicy {
	if info, err := os.Stat(file); err == nil && !info.Mode().IsRegular() {
		return &loadedPolicy{err: srcpos.Errors{{File: file, Severity: srcpos.SeverityError, Msg: "not a regular file"}}}
	}
	p, err := policy.Load(file)
	return &loadedPolicy{policy: p, err: err}
}

// problemCount says how many problems a policy load error holds.
func problemCount(err error) string {
	var pe srcpos.Errors
	if errors.As(err, &pe) {
		return fmt.Sprintf("%d problem(s), each reported at its line", len(pe))
	}
	return err.Error()
}

// firstLine is an error's first problem, and how many more there are.
func firstLine(err error) string {
	first, rest, _ := strings.Cut(err.Error(), "\n")
	if n := strings.Count(rest, "\n") + 1; rest != "" {
		return fmt.Sprintf("%s; and %d more", first, n)
	}
	return first
}

// policyFor is handler h's policy: the one Load read, or for a handler
// built in code, the file loaded once per Runner.
func (r *Runner) policyFor(h *Handler) *loadedPolicy {
	if h.policy != nil {
		return h.policy
	}
	if v, ok := r.policies.Load(h.PolicyFile); ok {
		return v.(*loadedPolicy)
	}
	v, _ := r.policies.LoadOrStore(h.PolicyFile, loadPolicy(h.PolicyFile))
	return v.(*loadedPolicy)
}

// decidePolicy runs a policy handler on one event (kind as the handler's
// dialect names it) and returns its answer in that dialect, with the
// decision for the log line. Remote-sandbox dialect: allow, deny, and ask
// goes to the policy's approver (through the runner's HTTP client), else
// is a deny "needs approval". Agent-CLI dialect: allow, ask and deny as
// they are. Any other event: nothing to decide.
func (r *Runner) decidePolicy(ctx context.Context, h *Handler, kind EventKind, payload []byte) ([]byte, invokeFailure) {
	if !kind.IsPre() {
		outcome := OutcomeAnswered
		switch {
		case kind.isPost():
			outcome = OutcomeAllow
		case kind == Stop:
			outcome = OutcomeStop // no request to continue
		}
		return nil, invokeFailure{outcome: outcome, detail: "policy handlers gate pre-tool events only: nothing to decide"}
	}
	lp := r.policyFor(h)
	var d policy.Decision
	var approver string
	switch {
	case lp.err != nil:
		d = policy.Decision{Action: policy.Deny, Reason: fmt.Sprintf("policy %s did not load: %s", h.PolicyFile, firstLine(lp.err)),
			Rule: policy.Rule{File: h.PolicyFile, Level: policy.LevelDefault, Source: "load error"}, Err: lp.err}
	default:
		d, approver = r.decideEvent(ctx, lp.policy, kind, payload)
	}
	return d.AnswerJSON(), invokeFailure{policy: &policyResult{decision: d, approver: approver}}
}

// policyResult is a policy handler's decision, for its log line.
type policyResult struct {
	decision policy.Decision
	// approver is what the approver did with an ask in the remote-sandbox
	// dialect (none, allow, deny, timeout, ...); "" when not asked.
	approver string
}

// decideEvent decides one pre-tool event with a loaded policy, and says
// what the approver did if it was asked.
func (r *Runner) decideEvent(ctx context.Context, p *policy.Policy, kind EventKind, payload []byte) (policy.Decision, string) {
	in, err := policy.EventInput(payload, keysOf(kind.Dialect()).call)
	if err != nil {
		return policy.Decision{Action: policy.Deny, Reason: "policy handler: " + err.Error(),
			Rule: policy.Rule{File: p.File(), Level: policy.LevelDefault, Source: "malformed event"}, Err: err}, ""
	}
	d := p.Decide(ctx, in)
	if kind == PreToolExecution && d.Action == policy.Ask {
		var post policy.ApproverPost
		if r.opts.HTTP != nil {
			post = r.opts.HTTP.PostAnswer
		}
		return p.Approve(ctx, d, payload, post)
	}
	return d, ""
}
