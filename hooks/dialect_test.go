package hooks

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// exampleInput is the reference input of each event, in its dialect.
func exampleInput(t *testing.T, kind EventKind) Event {
	switch kind {
	case PreToolExecution, PostToolExecution:
		return event(t, kind, "run_command", `{"CommandLine": "npm test"}`)
	case SessionStart:
		return parseEv(t, kind, exSessionStart)
	case PreToolUse:
		return parseEv(t, kind, exPreToolUse)
	case PostToolUse:
		return parseEv(t, kind, exPostToolUse)
	case PreInvocation, PostInvocation:
		return parseEv(t, kind, exPreInvocation)
	}
	return parseEv(t, kind, exStop)
}

// TestCrossDialectRemoteGateOnPreToolUse: the remote-sandbox reference
// gate (gate.py, unchanged) answers an agent-CLI PreToolUse call: it reads
// "tool_call", so it can only deny if it got the payload in its own form.
func TestCrossDialectRemoteGateOnPreToolUse(t *testing.T) {
	needPython(t)
	e := newEnv(t)
	installExamples(t, e.root, "https://127.0.0.1:1")
	e.writeWS(t, file(group("after", PreToolUse, cmdHook("touch after-ran; echo '{\"decision\": \"allow\"}'", ""))))
	r, _ := e.runner(t, RunnerOptions{})
	ctx := ctxT(t)

	d := r.Run(ctx, parseEv(t, PreToolUse, `{"toolCall": {"name": "code_execution", "args": {"code": "rm -rf /tmp/x"}}, "stepIdx": 2, "conversationId": "c-1"}`))
	out, _ := json.Marshal(d)
	jsonEqual(t, out, `{"decision": "deny", "reason": "Destructive command blocked by security gate."}`)
	if len(d.Results) != 1 {
		t.Fatalf("the remote deny must end the PreToolUse chain: %+v", d.Results)
	}
	d = r.Run(ctx, parseEv(t, PreToolUse, `{"toolCall": {"name": "code_execution", "args": {"code": "ls"}}, "conversationId": "c-1"}`))
	if d.Decision != Allow || len(d.Results) != 2 || d.Results[0].Outcome != OutcomeAllow {
		t.Fatalf("ls: %+v", d)
	}
}

// TestCrossDialectPayloads: each handler gets the caller's payload in its
// own file's dialect; unknown fields unchanged.
func TestCrossDialectPayloads(t *testing.T) {
	e := newEnv(t)
	e.writeRoot(t, `{"remote": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "cat > remote.json; echo '{\"decision\": \"allow\"}'"}]}]}}`)
	e.writeWS(t, file(group("cli", PreToolUse, cmdHook(`cat > cli.json; echo '{"decision": "allow"}'`, ""))))
	r, _ := e.runner(t, RunnerOptions{})
	ctx := ctxT(t)

	// An agent-CLI caller.
	r.Run(ctx, parseEv(t, PreToolUse, `{"toolCall": {"name": "run_command", "args": {"a": 1}}, "conversationId": "c-1", "stepIdx": 7, "error": "e"}`))
	remote, _ := os.ReadFile(filepath.Join(e.ws, "remote.json"))
	jsonEqual(t, remote, `{"tool_call": {"name": "run_command", "args": {"a": 1}}, "environment_id": "c-1", "stepIdx": 7, "error": "e"}`)
	cli, _ := os.ReadFile(filepath.Join(e.ws, "cli.json"))
	jsonEqual(t, cli, `{"toolCall": {"name": "run_command", "args": {"a": 1}}, "conversationId": "c-1", "stepIdx": 7, "error": "e"}`)

	// A remote-sandbox caller.
	r.Run(ctx, event(t, PreToolExecution, "run_command", `{"a": 2}`))
	remote, _ = os.ReadFile(filepath.Join(e.ws, "remote.json"))
	jsonEqual(t, remote, `{"tool_call": {"name": "run_command", "args": {"a": 2}}, "environment_id": "env_test"}`)
	cli, _ = os.ReadFile(filepath.Join(e.ws, "cli.json"))
	jsonEqual(t, cli, `{"toolCall": {"name": "run_command", "args": {"a": 2}}, "conversationId": "env_test"}`)
}

// TestCrossDialectCLIGateOnPreToolExecution: an agent-CLI gate answers a
// remote-sandbox call; verdicts that need an approval deny there, since a
// remote runtime has nobody to ask.
func TestCrossDialectCLIGateOnPreToolExecution(t *testing.T) {
	needPython(t)
	gate := `python3 -c 'import json,sys
d = json.load(sys.stdin)
cmd = d["toolCall"]["args"].get("code", "")
if "rm -rf" in cmd: print(json.dumps({"decision": "deny", "reason": "cli gate: no rm -rf"}))
elif "npm" in cmd: print(json.dumps({"decision": "ask", "reason": "confirm npm"}))
elif "make" in cmd: print(json.dumps({"decision": "auto_approve"}))
else: print(json.dumps({"decision": "allow", "reason": "fine"}))'`
	e := newEnv(t)
	e.writeWS(t, file(group("gate", PreToolUse, cmdHook(gate, ""))))
	r, _ := e.runner(t, RunnerOptions{})
	ctx := ctxT(t)
	for _, tc := range []struct{ code, want string }{
		{"rm -rf /", `{"decision": "deny", "reason": "cli gate: no rm -rf"}`},
		{"npm test", `{"decision": "deny", "reason": "confirm npm (ask: no approval is possible on pre_tool_execution)"}`},
		{"make", `{"decision": "allow"}`},
		{"ls", `{"decision": "allow"}`},
	} {
		d := r.Run(ctx, event(t, PreToolExecution, "code_execution", mustJSON(t, map[string]string{"code": tc.code})))
		out, _ := json.Marshal(d)
		jsonEqual(t, out, tc.want)
		if d.Denied() != strings.Contains(tc.want, "deny") {
			t.Errorf("%s: Denied() = %v", tc.code, d.Denied())
		}
	}
}

// TestRemoteHandlersSkipCLIOnlyEvents: the remote-sandbox dialect has no
// SessionStart, PreInvocation, PostInvocation or Stop, so its handlers
// never see them; its post hooks do see PostToolUse.
func TestRemoteHandlersSkipCLIOnlyEvents(t *testing.T) {
	e := newEnv(t)
	e.writeRoot(t, `{"all": {"pre_tool_execution": [{"matcher": "", "hooks": [{"command": "touch pre-ran; echo '{}'"}]}],
	  "post_tool_execution": [{"matcher": "", "hooks": [{"command": "touch post-ran"}]}]}}`)
	r, _ := e.runner(t, RunnerOptions{})
	for _, kind := range []EventKind{SessionStart, PreInvocation, PostInvocation, Stop} {
		if d := r.Run(ctxT(t), exampleInput(t, kind)); len(d.Results) != 0 {
			t.Errorf("%s ran %+v", kind, d.Results)
		}
	}
	if _, err := os.Stat(filepath.Join(e.ws, "pre-ran")); err == nil {
		t.Error("a remote handler saw an agent-CLI-only event")
	}
	if d := r.Run(ctxT(t), exampleInput(t, PostToolUse)); len(d.Results) != 1 {
		t.Fatalf("PostToolUse: %+v", d.Results)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "post-ran")); err != nil {
		t.Error("the remote post hook did not run on PostToolUse")
	}
}

// TestDiscoveryOrder: root, workspaces, global, plugins, in that order;
// the root file's group cannot be disabled or replaced by any of them.
func TestDiscoveryOrder(t *testing.T) {
	e := newEnv(t)
	ws2 := t.TempDir()
	home := t.TempDir()
	plugins := t.TempDir()
	order := filepath.Join(e.ws, "order.txt")
	rec := func(name string) string {
		return cmdHook(fmt.Sprintf(`echo %s:$(pwd) >> %s; echo '{"decision": "allow"}'`, name, order), "")
	}
	e.writeRoot(t, `{"gate": {"pre_tool_execution": [{"matcher": "*", "hooks": [`+rec("root")+`]}]}}`)
	e.writeWS(t, file(group("ws", PreToolUse, rec("ws1"))))
	writeFile(t, filepath.Join(ws2, HooksFile), file(group("ws", PreToolUse, rec("ws2"))))
	global := filepath.Join(home, GlobalFile)
	writeFile(t, global, `{"gate": {"enabled": false, "PreToolUse": [{"matcher": "*", "hooks": [`+rec("impostor")+`]}]}, `+group("global", PreToolUse, rec("global"))+`}`)
	writeFile(t, filepath.Join(plugins, "zeta", PluginFile), file(group("z", PreToolUse, rec("zeta"))))
	writeFile(t, filepath.Join(plugins, "alpha", PluginFile), file(group("gate", PreToolUse, rec("alpha"))))

	h, problems, err := Load(LoadOptions{Root: e.root, Workspace: e.ws, Workspaces: []string{ws2}, Global: global, Plugins: []string{plugins}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range h.Groups {
		names = append(names, fmt.Sprintf("%s(%s,%s)", g.Name, g.Source, g.Dialect))
	}
	want := "gate(root,remote-sandbox) ws(workspace,agent-cli) ws(workspace,agent-cli) global(global,agent-cli) alpha/gate(plugin,agent-cli) zeta/z(plugin,agent-cli)"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("groups = %s\nwant     %s", got, want)
	}
	if len(problems) != 1 || problems[0].File != global || !strings.Contains(problems[0].Msg, `group "gate" is defined in`) {
		t.Fatalf("problems = %v", problems)
	}
	r := NewRunner(h, RunnerOptions{})
	if d := r.Run(ctxT(t), exampleInput(t, PreToolUse)); len(d.Results) != 6 {
		t.Fatalf("results = %+v", d.Results)
	}
	got, _ := os.ReadFile(order)
	wantOrder := strings.Join([]string{"root:" + e.ws, "ws1:" + e.ws, "ws2:" + ws2, "global:" + e.ws, "alpha:" + e.ws, "zeta:" + e.ws}, "\n") + "\n"
	if string(got) != wantOrder {
		t.Fatalf("run order:\n%s\nwant:\n%s", got, wantOrder)
	}
}

// TestFailOpenEveryEvent: every failure kind on every event of both
// dialects fails open (no decision, no steps, stop allowed) with its
// outcome logged; "on_failure": "deny" makes a pre event's failure deny.
func TestFailOpenEveryEvent(t *testing.T) {
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		w.Write([]byte(`{"decision": "deny"}`))
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "https://" + ln.Addr().String() + "/"
	ln.Close()
	client := httpClient(t, ca)

	// A strong answer per event, printed by the failing commands, which
	// must not count.
	strong := map[EventKind]string{
		PreToolExecution: `{"decision": "deny"}`, PreToolUse: `{"decision": "deny"}`,
		Stop: `{"decision": "continue"}`, SessionStart: `{"injectSteps": [{"userMessage": "x"}]}`,
		PreInvocation:  `{"injectSteps": [{"userMessage": "x"}], "terminationBehavior": "terminate"}`,
		PostInvocation: `{"terminationBehavior": "terminate"}`, PostToolExecution: `{}`, PostToolUse: `{}`,
	}
	neutral := map[EventKind]string{
		PreToolExecution: `{"decision": "allow"}`, PostToolExecution: `{"decision": "allow"}`,
		PreToolUse: `{"decision": "allow"}`, PostToolUse: `{}`, SessionStart: `{"injectSteps": []}`,
		PreInvocation: `{"injectSteps": [], "terminationBehavior": ""}`, PostInvocation: `{"injectSteps": [], "terminationBehavior": ""}`,
		Stop: `{"decision": "stop"}`,
	}
	failures := []struct {
		name    string
		handler func(kind EventKind) string
		outcome Outcome
	}{
		{"exit status", func(k EventKind) string { return cmdHook("echo '"+strong[k]+"'; exit 3", "") }, OutcomeExitStatus},
		{"timeout", func(k EventKind) string { return cmdHook("sleep 5; echo '"+strong[k]+"'", `, "timeout": 0.1`) }, OutcomeTimeout},
		{"bad JSON", func(k EventKind) string { return cmdHook("echo '"+strong[k]+"' | tr -d '}'", "") }, OutcomeBadResponse},
		{"empty output", func(EventKind) string { return cmdHook("true", "") }, OutcomeBadResponse},
		{"spawn error", func(EventKind) string { return `{"type": "command"}` }, OutcomeSpawnError},
		{"non-2xx", func(EventKind) string { return httpHook(srv.URL, "") }, OutcomeHTTPStatus},
		{"unreachable", func(EventKind) string { return httpHook(closedURL, `, "timeout": 2`) }, OutcomeConnectError},
	}
	for _, kind := range EventKinds() {
		for _, f := range failures {
			for _, failDeny := range []bool{false, true} {
				name := string(kind) + "/" + f.name
				if failDeny {
					name += "/on_failure=deny"
				}
				t.Run(name, func(t *testing.T) {
					h := f.handler(kind)
					if failDeny {
						h = strings.TrimSuffix(h, "}") + `, "on_failure": "deny"}`
					}
					e := newEnv(t)
					if kind.Dialect() == DialectRemote {
						e.writeWS(t, `{"g": {"`+string(kind)+`": [{"matcher": "*", "hooks": [`+h+`]}]}}`)
					} else {
						e.writeWS(t, file(group("g", kind, h)))
					}
					r, logs := e.runner(t, RunnerOptions{HTTP: client, KillGrace: 100 * time.Millisecond})
					d := r.Run(ctxT(t), exampleInput(t, kind))
					wantOutcome := f.outcome
					if kind.isPost() && wantOutcome == OutcomeBadResponse {
						wantOutcome = OutcomeAllow // a post hook's output is not read
					}
					if len(d.Results) != 1 || d.Results[0].Outcome != wantOutcome {
						t.Fatalf("results = %+v", d.Results)
					}
					out, _ := json.Marshal(d)
					want, effect := neutral[kind], "fail-open"
					switch {
					case kind.isPost():
						effect = "ignored"
					case failDeny && kind.IsPre():
						want, effect = "", "fail-closed"
						if !d.Denied() || !strings.Contains(d.Reason, "configured with on_failure deny") {
							t.Fatalf("decision = %s", out)
						}
					}
					if want != "" {
						jsonEqual(t, out, want)
					}
					lines := logs.Lines(t)
					if len(lines) != 1 || lines[0][fieldOutcome] != string(wantOutcome) || lines[0][fieldEffect] != effect {
						t.Fatalf("log = %v", lines)
					}
				})
			}
		}
	}
}

// TestCrossDialectOverwriteOnRemoteCall: an agent-CLI handler's overwrite
// on a remote-sandbox call rewrites the args later handlers get (in their
// own dialect) and is passed on in the output.
func TestCrossDialectOverwriteOnRemoteCall(t *testing.T) {
	e := newEnv(t)
	e.writeRoot(t, file(group("rewrite", PreToolUse, echoHook(`{"decision": "auto_approve", "overwrite": {"code": "ls -la"}}`))))
	e.writeWS(t, `{"audit": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "cat > seen.json; echo '{\"decision\": \"allow\"}'"}]}]}}`)
	r, _ := e.runner(t, RunnerOptions{})
	d := r.Run(ctxT(t), event(t, PreToolExecution, "code_execution", `{"code": "ls", "language": "bash"}`))
	out, _ := json.Marshal(d)
	jsonEqual(t, out, `{"decision": "allow", "overwrite": {"code": "ls -la"}}`)
	seen, _ := os.ReadFile(filepath.Join(e.ws, "seen.json"))
	jsonEqual(t, seen, `{"tool_call": {"name": "code_execution", "args": {"code": "ls -la", "language": "bash"}}, "environment_id": "env_test"}`)
}
