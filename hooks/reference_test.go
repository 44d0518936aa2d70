package hooks

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is required in CI")
		}
		t.Skip("python3 not found")
	}
}

// installExamples copies configs/hooks (meant to be mounted at /.agents)
// into root/.agents, pointing the commands at it and the audit hook at url.
func installExamples(t *testing.T, root, auditURL string) {
	t.Helper()
	src := filepath.Join("..", "configs", "hooks")
	data, err := os.ReadFile(filepath.Join(src, "hooks.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(data), "/.agents/", filepath.Join(root, ".agents")+"/")
	s = strings.ReplaceAll(s, "https://telemetry.example.com", auditURL)
	writeFile(t, filepath.Join(root, HooksFile), s)
	scripts, err := filepath.Glob(filepath.Join(src, "hooks-scripts", "*.py"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no example scripts: %v", err)
	}
	for _, p := range scripts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, ".agents", "hooks-scripts", filepath.Base(p)), string(b))
	}
}

func TestReferenceExamples(t *testing.T) {
	needPython(t)
	var mu sync.Mutex
	var audit []*http.Request
	var auditBodies []string
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		audit = append(audit, r)
		auditBodies = append(auditBodies, string(b))
		mu.Unlock()
		w.Write([]byte("{}"))
	}))
	e := newEnv(t)
	installExamples(t, e.root, srv.URL)
	h, problems := e.load(t)
	if problems.HasErrors() {
		t.Fatalf("example hooks.json has problems: %v", problems)
	}
	if len(h.Groups) != 4 {
		t.Fatalf("groups = %d, want 4", len(h.Groups))
	}
	r, logs := e.runner(t, RunnerOptions{HTTP: httpClient(t, ca)})
	ctx := ctxT(t)

	t.Run("security gate denies rm -rf", func(t *testing.T) {
		d := r.Run(ctx, event(t, PreToolExecution, "code_execution", `{"code":"rm -rf /tmp/forbidden","language":"bash"}`))
		if !d.Denied() || d.Reason != "Destructive command blocked by security gate." {
			t.Fatalf("decision = %+v", d)
		}
	})
	t.Run("security gate allows ls", func(t *testing.T) {
		d := r.Run(ctx, event(t, PreToolExecution, "code_execution", `{"code":"ls -la","language":"bash"}`))
		if d.Denied() || len(d.Results) != 1 || d.Results[0].Outcome != OutcomeAllow {
			t.Fatalf("decision = %+v", d)
		}
	})
	t.Run("privacy gate denies /private/", func(t *testing.T) {
		d := r.Run(ctx, event(t, PreToolExecution, "read_file", `{"path":"/workspace/private/employees.json"}`))
		if !d.Denied() || !strings.Contains(d.Reason, "PII compliance policy") {
			t.Fatalf("decision = %+v", d)
		}
	})
	t.Run("privacy gate allows /public/", func(t *testing.T) {
		d := r.Run(ctx, event(t, PreToolExecution, "read_file", `{"path":"/workspace/public/summary.json"}`))
		if d.Denied() || len(d.Results) != 1 {
			t.Fatalf("decision = %+v", d)
		}
	})
	t.Run("privacy gate ignores write_file", func(t *testing.T) {
		d := r.Run(ctx, event(t, PreToolExecution, "write_file", `{"path":"/workspace/private/x"}`))
		if d.Denied() || len(d.Results) != 0 {
			t.Fatalf("decision = %+v", d)
		}
	})
	t.Run("catch-all formatter and audit on post", func(t *testing.T) {
		path := filepath.Join(e.ws, "data.json")
		writeFile(t, path, `{"b":1,"a":[1,2]}`)
		args := mustJSON(t, map[string]string{"path": path, "content": "..."})
		d := r.Run(ctx, event(t, PostToolExecution, "write_file", args))
		if d.Denied() || len(d.Results) != 2 {
			t.Fatalf("decision = %+v", d)
		}
		for _, res := range d.Results {
			if res.Outcome != OutcomeAllow {
				t.Errorf("%s: outcome %s (%s, stderr %q)", res.Group, res.Outcome, res.Detail, res.Stderr)
			}
		}
		got, _ := os.ReadFile(path)
		if want := "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ]\n}\n"; string(got) != want {
			t.Errorf("formatted file = %q, want %q", got, want)
		}
		// The formatter runs for every tool; audit only for *_file tools.
		d = r.Run(ctx, event(t, PostToolExecution, "code_execution", `{"code":"ls"}`))
		if len(d.Results) != 1 || d.Results[0].Group != "auto-format" {
			t.Fatalf("post code_execution ran %+v", d.Results)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(audit) != 1 {
			t.Fatalf("audit received %d requests, want 1", len(audit))
		}
		req := audit[0]
		if req.Header.Get("X-Event-Source") != "agent-sandbox" || req.Header.Get("Content-Type") != "application/json" ||
			req.Header.Get("User-Agent") != "hookgate/test" || req.Header.Get("Idempotency-Key") == "" {
			t.Errorf("audit headers = %v", req.Header)
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(auditBodies[0]), &body); err != nil || body["environment_id"] != "env_test" {
			t.Errorf("audit body = %s", auditBodies[0])
		}
	})

	// Every handler run left exactly one line with the required fields.
	for _, l := range logs.Lines(t) {
		for _, f := range []string{fieldEvent, fieldTool, fieldGroup, fieldHandler, fieldOutcome, fieldDetail, fieldDuration} {
			if _, ok := l[f]; !ok {
				t.Errorf("log line lacks %q: %v", f, l)
			}
		}
	}
}

// TestAgentCLIExample: configs/hooks/agent-cli, installed as a workspace's
// .agents, loads cleanly and gates both an agent-CLI and a remote-sandbox
// caller.
func TestAgentCLIExample(t *testing.T) {
	needPython(t)
	src := filepath.Join("..", "configs", "hooks", "agent-cli")
	e := newEnv(t)
	for _, f := range []string{"hooks.json", filepath.Join("hooks-scripts", "gate.py")} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(e.ws, ".agents", f), string(b))
	}
	if _, problems := e.load(t); len(problems) > 0 {
		t.Fatalf("example has problems: %v", problems)
	}
	r, _ := e.runner(t, RunnerOptions{})
	ctx := ctxT(t)
	run := func(kind EventKind, payload string) string {
		out, _ := json.Marshal(r.Run(ctx, parseEv(t, kind, payload)))
		return string(out)
	}
	for _, tc := range []struct {
		kind           EventKind
		payload, wantS string
	}{
		{PreToolUse, `{"toolCall": {"name": "run_command", "args": {"CommandLine": "rm -rf build"}}}`, `{"decision":"deny","reason":"Destructive command blocked by the safety gate."}`},
		{PreToolUse, `{"toolCall": {"name": "run_command", "args": {"CommandLine": "git push"}}}`, `{"decision":"ask","reason":"Pushing needs your confirmation.","permissionOverrides":["command(git push)"]}`},
		{PreToolUse, `{"toolCall": {"name": "run_command", "args": {"CommandLine": "ls"}}}`, `{"decision":"allow"}`},
		{PreToolExecution, `{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /"}}}`, `{"decision":"deny","reason":"Destructive command blocked by the safety gate."}`},
		{PreInvocation, `{"invocationNum": 0}`, `{"injectSteps":[{"ephemeralMessage":"Run the linter before you finish."}],"terminationBehavior":""}`},
	} {
		if got := run(tc.kind, tc.payload); got != tc.wantS {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.kind, tc.payload, got, tc.wantS)
		}
	}
}
