package hooks

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hookgate/hookgate/internal/testlog"
)

// referencePolicy is the reference's example: deny("*"), allow(view_file),
// allow(list_directory), ask(run_command), plus a predicate and a remote
// tool so both vocabularies are exercised.
const referencePolicy = `rules:
  - deny: "*"
  - allow: view_file
  - allow: list_directory
  - ask: run_command
  - deny: code_execution
    when: 'args.code.matches("rm\\s+-rf")'
    reason: destructive command
  - ask: code_execution
  - allow: read_file
`

// policyGroup is a hooks.json group running the policy file on every tool
// of the pre-tool event kind, plus a post-tool rule with the same handler.
func policyGroup(name string, pre, post EventKind, file string) string {
	h := fmt.Sprintf(`{"type": "policy", "file": %q}`, file)
	return fmt.Sprintf(`{%q: {%q: [{"matcher": "*", "hooks": [%s]}], %q: [{"matcher": "*", "hooks": [%s]}]}}`,
		name, pre, h, post, h)
}

// policyLine returns the one log line of the policy handler.
func policyLine(t *testing.T, lb *testlog.Buffer) map[string]any {
	t.Helper()
	var found map[string]any
	for _, l := range lb.Lines(t) {
		if l[fieldHandlerType] == string(PolicyHandler) {
			if found != nil {
				t.Fatalf("two policy lines in %s", lb)
			}
			found = l
		}
	}
	if found == nil {
		t.Fatalf("no policy handler line in %s", lb)
	}
	return found
}

// TestPolicyHandlerRemote: in the remote-sandbox dialect a policy handler
// allows and denies as the policy says, and an ask without an approver is
// a deny "needs approval"; every line names the policy file, the rule
// (file:line) and its level. The file is relative to the hooks.json.
func TestPolicyHandlerRemote(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, ".agents", "gate", "policy.yaml"), referencePolicy)
	e.writeWS(t, policyGroup("gate", PreToolExecution, PostToolExecution, "gate/policy.yaml"))
	r, lb := e.runner(t, RunnerOptions{})
	policyFile := filepath.Join(e.ws, ".agents", "gate", "policy.yaml")

	for _, tc := range []struct {
		tool, args string
		want       Verdict
		reason     string
		line       int
		kind       string
	}{
		{"view_file", `{"AbsolutePath": "/w/a"}`, Allow, "", 3, "tool allow"},
		{"list_directory", `{}`, Allow, "", 4, "tool allow"},
		{"read_file", `{"path": "/w/a"}`, Allow, "", 10, "tool allow"},
		{"write_file", `{"path": "/w/a"}`, Deny, `"write_file" denied by the policy rule at ` + policyFile + `:2 (* deny)`, 2, "* deny"},
		{"code_execution", `{"code": "rm -rf /"}`, Deny, "destructive command", 6, "tool deny"},
		{"code_execution", `{"code": "ls"}`, Deny, "needs approval: ", 9, "tool ask"},
		{"run_command", `{"CommandLine": "ls"}`, Deny, "needs approval: ", 5, "tool ask"},
	} {
		lb.Reset()
		d := r.Run(ctxT(t), event(t, PreToolExecution, tc.tool, tc.args))
		if d.Decision != tc.want || !strings.HasPrefix(d.Reason, tc.reason) {
			t.Errorf("%s %s: %s %q, want %s %q", tc.tool, tc.args, d.Decision, d.Reason, tc.want, tc.reason)
		}
		l := policyLine(t, lb)
		if l["policy"] != policyFile || l["rule"] != fmt.Sprintf("%s:%d", policyFile, tc.line) || l["rule_kind"] != tc.kind {
			t.Errorf("%s: log line %v, want rule %s:%d (%s)", tc.tool, l, policyFile, tc.line, tc.kind)
		}
		if tc.kind == "tool ask" && l["approver"] != "none" {
			t.Errorf("%s: approver %v, want none", tc.tool, l["approver"])
		}
	}

	// A post event: the policy has nothing to decide, even for a tool it
	// denies.
	lb.Reset()
	d := r.Run(ctxT(t), event(t, PostToolExecution, "write_file", `{"path": "/w/a"}`))
	if d.Decision != Allow {
		t.Fatalf("post event: %+v", d)
	}
	if l := policyLine(t, lb); l[fieldOutcome] != string(OutcomeAllow) || l["rule"] != nil {
		t.Fatalf("post event line: %v", l)
	}
}

// TestPolicyHandlerCLI: in the agent-CLI dialect allow, ask and deny are
// answered as they are; the CLI's events without a tool get nothing from
// a policy handler.
func TestPolicyHandlerCLI(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, "policies", "p.yaml"), referencePolicy)
	policyFile := filepath.Join(e.ws, "policies", "p.yaml")
	// An absolute path, and the other events holding a policy handler too.
	h := fmt.Sprintf(`{"type": "policy", "file": %q}`, policyFile)
	e.writeWS(t, fmt.Sprintf(`{"gate": {"PreToolUse": [{"matcher": "*", "hooks": [%[1]s]}], "PostToolUse": [{"matcher": "*", "hooks": [%[1]s]}],
		"SessionStart": [%[1]s], "PreInvocation": [%[1]s], "PostInvocation": [%[1]s], "Stop": [%[1]s]}}`, h))
	r, lb := e.runner(t, RunnerOptions{})

	for _, tc := range []struct {
		tool, args string
		want       Verdict
		line       int
	}{
		{"view_file", `{"AbsolutePath": "/w/a"}`, Allow, 3},
		{"run_command", `{"CommandLine": "ls"}`, Ask, 5},
		{"write_to_file", `{"TargetFile": "/w/a"}`, Deny, 2},
	} {
		lb.Reset()
		d := r.Run(ctxT(t), parseEv(t, PreToolUse, fmt.Sprintf(`{"toolCall": {"name": %q, "args": %s}, "conversationId": "c"}`, tc.tool, tc.args)))
		out, _ := json.Marshal(d)
		if d.Decision != tc.want {
			t.Errorf("%s: %s, want %s", tc.tool, out, tc.want)
		}
		if tc.want != Allow && !strings.Contains(d.Reason, fmt.Sprintf("%s:%d", policyFile, tc.line)) {
			t.Errorf("%s: reason %q does not name the rule", tc.tool, d.Reason)
		}
		if l := policyLine(t, lb); l["rule"] != fmt.Sprintf("%s:%d", policyFile, tc.line) || l["approver"] != nil {
			t.Errorf("%s: log line %v", tc.tool, l)
		}
	}

	for _, kind := range []EventKind{PostToolUse, SessionStart, PreInvocation, PostInvocation, Stop} {
		lb.Reset()
		d := r.Run(ctxT(t), exampleInput(t, kind))
		out, _ := json.Marshal(d)
		if d.Decision == Deny || len(d.InjectSteps) > 0 || d.TerminationBehavior != "" || d.Decision == Continue {
			t.Errorf("%s: a policy handler must add nothing: %s", kind, out)
		}
		if l := policyLine(t, lb); l[fieldOutcome] == nil || strings.HasPrefix(fmt.Sprint(l[fieldEffect]), "fail") || l["rule"] != nil {
			t.Errorf("%s: log line %v", kind, l)
		}
	}
}

// TestPolicyHandlerApprover: in the remote-sandbox dialect an ask goes to
// the policy's approver, whose allow or deny is the answer, over HTTPS.
func TestPolicyHandlerApprover(t *testing.T) {
	var asked atomic.Int32
	srv, caFile := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Hookgate-Policy-Rule") == "" || !strings.Contains(string(body), `"tool_call"`) {
			http.Error(w, "bad question", http.StatusBadRequest)
			return
		}
		if strings.Contains(string(body), "make") {
			fmt.Fprint(w, `{"decision": "allow"}`)
			return
		}
		fmt.Fprint(w, `{"decision": "deny", "reason": "not today"}`)
	}))
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, ".agents", "policy.yaml"), "rules:\n  - ask: code_execution\napprover: "+srv.URL+"/approve\napprover_timeout: 10s\n")
	e.writeWS(t, policyGroup("gate", PreToolExecution, PostToolExecution, "policy.yaml"))
	r, lb := e.runner(t, RunnerOptions{HTTP: httpClient(t, caFile)})

	d := r.Run(ctxT(t), event(t, PreToolExecution, "code_execution", `{"code": "make"}`))
	if d.Decision != Allow || policyLine(t, lb)["approver"] != "allow" {
		t.Fatalf("approved: %+v %s", d, lb)
	}
	lb.Reset()
	d = r.Run(ctxT(t), event(t, PreToolExecution, "code_execution", `{"code": "curl"}`))
	if d.Decision != Deny || d.Reason != "not today" || policyLine(t, lb)["approver"] != "deny" {
		t.Fatalf("refused: %+v %s", d, lb)
	}
	if asked.Load() != 2 {
		t.Fatalf("approver asked %d times, want 2", asked.Load())
	}
}

// TestPolicyHandlerBrokenPolicy: a policy that does not load is a load
// problem at file:line (the policy's own, and the handler's), and the
// handler then denies every pre-tool call with the load error as the
// reason, even on_failure-less; post events stay allowed.
func TestPolicyHandlerBrokenPolicy(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, ".agents", "policy.yaml"), "rules:\n  - allow: view_file\n  - dney: run_command\n")
	e.writeWS(t, policyGroup("gate", PreToolExecution, PostToolExecution, "policy.yaml"))
	_, problems := e.load(t)
	text := problems.Error()
	policyFile := filepath.Join(e.ws, ".agents", "policy.yaml")
	if !strings.Contains(text, policyFile+":3") || !strings.Contains(text, filepath.Join(e.ws, HooksFile)+":1") ||
		!strings.Contains(text, "did not load") || !problems.HasErrors() {
		t.Fatalf("problems:\n%s", text)
	}
	own := 0
	for _, p := range problems {
		if p.File == policyFile {
			own++
		}
	}
	if own != 2 { // two handlers name the file: its two problems are reported once each
		t.Fatalf("%d problems of the policy file itself, want 2:\n%s", own, text)
	}
	r, lb := e.runner(t, RunnerOptions{})
	d := r.Run(ctxT(t), event(t, PreToolExecution, "view_file", `{}`))
	if d.Decision != Deny || !strings.Contains(d.Reason, "did not load") || !strings.Contains(d.Reason, policyFile+":3") {
		t.Fatalf("broken policy: %+v", d)
	}
	if l := policyLine(t, lb); l["fail_closed"] != true || l["policy"] != policyFile {
		t.Fatalf("log line %v", l)
	}
	if d := r.Run(ctxT(t), event(t, PostToolExecution, "view_file", `{}`)); d.Decision != Allow {
		t.Fatalf("post event: %+v", d)
	}

	// A missing file is the same: deny.
	e2 := newEnv(t)
	e2.writeWS(t, policyGroup("gate", PreToolExecution, PostToolExecution, "nowhere.yaml"))
	r2, _ := e2.runner(t, RunnerOptions{})
	if d := r2.Run(ctxT(t), event(t, PreToolExecution, "view_file", `{}`)); d.Decision != Deny || !strings.Contains(d.Reason, "nowhere.yaml") {
		t.Fatalf("missing policy: %+v", d)
	}
}

// TestPolicyHandlerLoadErrors: a policy handler needs a file, takes no
// other type's fields, and fails closed when broken.
func TestPolicyHandlerLoadErrors(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, `{"gate": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"type": "policy", "command": "x"}]}]}}`)
	h, problems := e.load(t)
	text := problems.Error()
	if !strings.Contains(text, `policy handler without "file"`) || !strings.Contains(text, `"command" belongs to "type": "command" handlers`) {
		t.Fatalf("problems:\n%s", text)
	}
	r := NewRunner(h, RunnerOptions{})
	if d := r.Run(ctxT(t), event(t, PreToolExecution, "view_file", `{}`)); d.Decision != Deny {
		t.Fatalf("a broken policy handler must deny: %+v", d)
	}
}

// TestPolicyHandlerCache: one policy file named by several handlers and
// files is read once per Load, and once per Runner for handlers built in
// code.
func TestPolicyHandlerCache(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(e.root, "policy.yaml")
	writeFile(t, file, referencePolicy)
	e.writeRoot(t, policyGroup("a", PreToolExecution, PostToolExecution, file))
	e.writeWS(t, policyGroup("b", PreToolExecution, PostToolExecution, file))
	h, _ := e.load(t)
	var first *loadedPolicy
	for _, g := range h.Groups {
		for _, rules := range g.Rules {
			for _, hd := range rules[0].Handlers {
				if first == nil {
					first = hd.policy
				}
				if hd.policy == nil || hd.policy != first {
					t.Fatalf("handler of %s has its own copy of the policy", g.Name)
				}
			}
		}
	}

	built := &Hooks{Groups: []*Group{{Name: "code", Enabled: true, Dialect: DialectRemote, Rules: map[EventKind][]*Rule{
		PreToolExecution: {{Matcher: compileMatcher("*"), Handlers: []*Handler{
			{Type: PolicyHandler, PolicyFile: file, Timeout: DefaultTimeout},
			{Type: PolicyHandler, PolicyFile: file, Timeout: DefaultTimeout},
		}}},
	}}}}
	r := NewRunner(built, RunnerOptions{})
	if d := r.Run(ctxT(t), event(t, PreToolExecution, "write_file", `{}`)); d.Decision != Deny || len(d.Results) != 2 {
		t.Fatalf("built in code: %+v", d)
	}
	n := 0
	r.policies.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d policies cached, want 1", n)
	}
}

// TestPolicyHandlerNotRegularFile: a policy "file" that is a FIFO is
// refused without opening it (opening would block), and the handler denies.
func TestPolicyHandlerNotRegularFile(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(e.ws, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	e.writeWS(t, policyGroup("gate", PreToolExecution, PostToolExecution, fifo))
	r, _ := e.runner(t, RunnerOptions{})
	if d := r.Run(ctxT(t), event(t, PreToolExecution, "read_file", `{}`)); d.Decision != Deny || !strings.Contains(d.Reason, "not a regular file") {
		t.Fatalf("FIFO policy: %+v", d)
	}
}
