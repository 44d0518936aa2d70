package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/internal/srcpos"
)

// oneHook is a hooks.json with one group holding one pre handler.
func oneHook(handler string) string {
	return `{"g": {"pre_tool_execution": [{"matcher": "*", "hooks": [` + handler + `]}]}}`
}

func cmdHook(command string, extra string) string {
	return fmt.Sprintf(`{"type": "command", "command": %q%s}`, command, extra)
}

func TestCommandOutcomes(t *testing.T) {
	cases := []struct {
		name    string
		command string
		timeout string
		outcome Outcome
		detail  string
	}{
		{"allow", `echo '{"decision": "allow"}'`, "", OutcomeAllow, ""},
		{"non-zero exit", `echo '{"decision":"deny","reason":"x"}'; exit 3`, "", OutcomeExitStatus, "exit status 3"},
		{"crash", `kill -SEGV $$`, "", OutcomeExitStatus, "killed by signal SIGSEGV"},
		{"command not found", `/nonexistent/hook-binary`, "", OutcomeExitStatus, "exit status 127 (command not found)"},
		{"timeout", `sleep 30`, `, "timeout": 0.2`, OutcomeTimeout, "timed out after 200ms; process group killed"},
		{"plain text", `echo looks fine to me`, "", OutcomeBadResponse, "not a JSON object"},
		{"other JSON", `echo '{"ok": true}'`, "", OutcomeBadResponse, `no "decision" field`},
		{"unknown decision", `echo '{"decision": "Deny"}'`, "", OutcomeBadResponse, `"decision" is "Deny"`},
		{"reason not a string", `echo '{"decision": "deny", "reason": 5}'`, "", OutcomeBadResponse, `"reason" is not a string`},
		{"two objects", `echo '{"decision": "allow"}{"decision":"deny"}'`, "", OutcomeBadResponse, "trailing data"},
		{"empty output", `true`, "", OutcomeBadResponse, "empty output"},
		{"oversized output", `head -c 1100000 /dev/zero | tr '\0' ' '; echo '{"decision":"deny"}'`, "", OutcomeBadResponse, "output exceeds 1048576 bytes"},
	}
	for _, tc := range cases {
		for _, failDeny := range []bool{false, true} {
			name := tc.name
			extra := tc.timeout
			if failDeny {
				name += "/on_failure=deny"
				extra += `, "on_failure": "deny"`
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				e.writeWS(t, oneHook(cmdHook(tc.command, extra)))
				r, logs := e.runner(t, RunnerOptions{KillGrace: 100 * time.Millisecond})
				d := r.Run(ctxT(t), event(t, PreToolExecution, "code_execution", `{"code":"ls"}`))
				if len(d.Results) != 1 {
					t.Fatalf("results = %+v", d.Results)
				}
				res := d.Results[0]
				if res.Outcome != tc.outcome || !strings.Contains(res.Detail, tc.detail) {
					t.Fatalf("outcome = %s %q, want %s containing %q (stderr %q)", res.Outcome, res.Detail, tc.outcome, tc.detail, res.Stderr)
				}
				wantDeny := failDeny && tc.outcome.Failed()
				if d.Denied() != wantDeny {
					t.Fatalf("denied = %v, want %v (%+v)", d.Denied(), wantDeny, d)
				}
				if wantDeny && !strings.Contains(d.Reason, string(tc.outcome)) {
					t.Errorf("reason %q does not name the failure %s", d.Reason, tc.outcome)
				}
				lines := logs.Lines(t)
				if len(lines) != 1 {
					t.Fatalf("log lines = %d, want 1", len(lines))
				}
				l := lines[0]
				wantEffect := "allow"
				switch {
				case wantDeny:
					wantEffect = "fail-closed"
				case tc.outcome.Failed():
					wantEffect = "fail-open"
				}
				if l[fieldOutcome] != string(tc.outcome) || l[fieldEffect] != wantEffect || l[fieldGroup] != "g" ||
					l[fieldEvent] != string(PreToolExecution) || l[fieldTool] != "code_execution" {
					t.Errorf("log line = %v", l)
				}
			})
		}
	}
}

func TestSpawnError(t *testing.T) {
	for _, failDeny := range []bool{false, true} {
		t.Run(fmt.Sprint("on_failure_deny=", failDeny), func(t *testing.T) {
			e := newEnv(t)
			extra := ""
			if failDeny {
				extra = `, "on_failure": "deny"`
			}
			e.writeWS(t, oneHook(cmdHook(`echo '{"decision":"allow"}'`, extra)))
			h, _ := e.load(t)
			h.Workspace = filepath.Join(e.ws, "gone") // cannot chdir there
			r := NewRunner(h, RunnerOptions{})
			d := r.Run(ctxT(t), event(t, PreToolExecution, "x", `{}`))
			if d.Results[0].Outcome != OutcomeSpawnError || d.Denied() != failDeny {
				t.Fatalf("decision = %+v", d)
			}
		})
	}
	t.Run("invalid handler fails closed", func(t *testing.T) {
		e := newEnv(t)
		e.writeWS(t, oneHook(`{"type": "http", "url": "http://insecure.example/x", "on_failure": "deny"}`))
		r, _ := e.runner(t, RunnerOptions{})
		d := r.Run(ctxT(t), event(t, PreToolExecution, "x", `{}`))
		if d.Results[0].Outcome != OutcomeSpawnError || !d.Denied() || !strings.Contains(d.Reason, "https://") {
			t.Fatalf("decision = %+v", d)
		}
	})
}

func TestCommandGetsEventAndWorkspace(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.ws, "seen.json")
	e.writeWS(t, oneHook(cmdHook(`cat > seen.json; pwd > pwd.txt; echo '{"decision":"allow"}'`, "")))
	r, _ := e.runner(t, RunnerOptions{})
	ev, err := ParseEvent(PreToolExecution, []byte(`{"tool_call": {"name": "t", "args": {"odd": [1, {"x": null}], "s": "ünï"}}, "extra": 1}`), "env_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Run(ctxT(t), ev); d.Results[0].Outcome != OutcomeAllow {
		t.Fatalf("decision = %+v", d)
	}
	got, _ := os.ReadFile(out)
	if want := `{"tool_call": {"name": "t", "args": {"odd": [1, {"x": null}], "s": "ünï"}}, "extra": 1,"environment_id":"env_1"}`; string(got) != want {
		t.Errorf("stdin = %s\nwant    %s", got, want)
	}
	pwd, _ := os.ReadFile(filepath.Join(e.ws, "pwd.txt"))
	if real, _ := filepath.EvalSymlinks(e.ws); strings.TrimSpace(string(pwd)) != real && strings.TrimSpace(string(pwd)) != e.ws {
		t.Errorf("pwd = %q, want %q", pwd, e.ws)
	}
}

// gone waits (bounded) until pid no longer runs: kill(pid, 0) fails with
// ESRCH, or the process is a zombie waiting for init to reap it (dead).
func gone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if stat, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); rerr == nil {
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				return // dead; only its reaping by init is pending
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running after the hook finished (kill: %v)", pid, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHangingCommandKillsProcessGroup(t *testing.T) {
	cases := []struct {
		name, command string
		timeout       string
		outcome       Outcome
	}{
		// A child that sleeps while the shell waits for it: timeout, group killed.
		{"child of a hanging shell", `sleep 300 & echo $! > child.pid; wait`, "0.3", OutcomeTimeout},
		// Both ignore SIGTERM: only the SIGKILL after the grace period ends them.
		{"TERM ignored", `trap '' TERM; sleep 300 & echo $! > child.pid; wait`, "0.3", OutcomeTimeout},
		// The shell answers and exits, leaving a background child holding
		// stdout: the answer counts, the child is killed, no waiting for it.
		{"background child left behind", `sleep 300 & echo $! > child.pid; echo '{"decision":"allow"}'`, "30", OutcomeAllow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.writeWS(t, oneHook(cmdHook(tc.command, `, "timeout": `+tc.timeout)))
			r, _ := e.runner(t, RunnerOptions{KillGrace: 200 * time.Millisecond})
			d := r.Run(ctxT(t), event(t, PreToolExecution, "code_execution", `{}`))
			if d.Results[0].Outcome != tc.outcome {
				t.Fatalf("outcome = %s (%s)", d.Results[0].Outcome, d.Results[0].Detail)
			}
			gone(t, readPid(t, filepath.Join(e.ws, "child.pid")))
		})
	}
}

func TestMatchers(t *testing.T) {
	tools := []string{"code_execution", "read_file", "write_file", "delete_file", "list_files", "read_file2", "xread_file", ""}
	cases := []struct {
		pattern string
		match   []string
		invalid bool
	}{
		{"", tools, false},
		{"*", tools, false},
		{".*", tools, false},
		{"code_execution", []string{"code_execution"}, false},
		{"read_file", []string{"read_file"}, false},
		{"read_file|write_file", []string{"read_file", "write_file"}, false},
		{".*_file", []string{"read_file", "write_file", "delete_file", "xread_file"}, false},
		{"(read|write)_file", []string{"read_file", "write_file"}, false},
		{"read_file2?", []string{"read_file", "read_file2"}, false},
		{"[rw][a-z]+_file", []string{"read_file", "write_file"}, false},
		{"(?i)READ_FILE", []string{"read_file"}, false},
		{"^read_file$", []string{"read_file"}, false},
		{"read", nil, false},
		{"*_file", nil, true},
		{"(", nil, true},
		{"a**", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.pattern, func(t *testing.T) {
			m := compileMatcher(tc.pattern)
			if (m.Err() != nil) != tc.invalid {
				t.Fatalf("err = %v, invalid = %v", m.Err(), tc.invalid)
			}
			want := map[string]bool{}
			for _, s := range tc.match {
				want[s] = true
			}
			for _, tool := range tools {
				if got := m.Match(tool); got != want[tool] {
					t.Errorf("Match(%q) = %v, want %v", tool, got, want[tool])
				}
			}
		})
	}
}

func TestInvalidMatcherReportedAndMatchesNothing(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, `{
  "g": {
    "pre_tool_execution": [
      {"matcher": "*_file", "hooks": [{"command": "echo '{\"decision\":\"deny\"}'"}]},
      {"matcher": ".*_file", "hooks": [{"command": "echo '{\"decision\":\"deny\",\"reason\":\"files\"}'"}]}
    ]
  }
}`)
	h, ps := e.load(t)
	if len(ps) != 1 {
		t.Fatalf("problems = %v", ps)
	}
	want := filepath.Join(e.ws, HooksFile) + `:4:19: error: g.pre_tool_execution[0].matcher: invalid RE2 pattern "*_file": missing argument to repetition operator: ` + "`*`" + `; this rule matches nothing (hint: "*_file" is a glob, not RE2; did you mean ".*_file"?)`
	if ps[0].Error() != want {
		t.Errorf("problem:\n got %s\nwant %s", ps[0], want)
	}
	d := NewRunner(h, RunnerOptions{}).Run(ctxT(t), event(t, PreToolExecution, "read_file", `{}`))
	if d.Reason != "files" || len(d.Results) != 1 {
		t.Fatalf("decision = %+v", d)
	}
}

func TestOrderAndReasons(t *testing.T) {
	e := newEnv(t)
	deny := func(r string) string {
		return cmdHook(fmt.Sprintf(`echo '{"decision":"deny","reason":"%s"}'`, r), "")
	}
	allow := cmdHook(`echo '{"decision":"allow"}'`, "")
	e.writeRoot(t, `{"r1": {"pre_tool_execution": [{"matcher": ".*", "hooks": [`+deny("root-1")+`, `+allow+`]}]},
		"off": {"enabled": false, "pre_tool_execution": [{"matcher": "*", "hooks": [`+deny("disabled")+`]}]}}`)
	e.writeWS(t, `{"w1": {"pre_tool_execution": [{"matcher": "t", "hooks": [`+deny("ws-1")+`]}, {"matcher": "other", "hooks": [`+deny("nope")+`]}]},
		"w2": {"pre_tool_execution": [{"matcher": "", "hooks": [`+allow+`, `+deny("ws-2")+`]}],
		       "post_tool_execution": [{"matcher": "", "hooks": [`+deny("post")+`]}]}}`)
	r, logs := e.runner(t, RunnerOptions{})
	d := r.Run(ctxT(t), event(t, PreToolExecution, "t", `{}`))
	if !d.Denied() || d.Reason != "root-1; ws-1; ws-2" {
		t.Fatalf("decision = %+v", d)
	}
	var order []string
	for _, res := range d.Results {
		order = append(order, res.Group+":"+string(res.Outcome))
	}
	if got := strings.Join(order, " "); got != "r1:deny r1:allow w1:deny w2:allow w2:deny" {
		t.Errorf("order = %s", got)
	}
	if n := len(logs.Lines(t)); n != 5 {
		t.Errorf("log lines = %d", n)
	}
	// Post: every handler runs, output ignored, never deny.
	d = r.Run(ctxT(t), event(t, PostToolExecution, "t", `{}`))
	if d.Denied() || len(d.Results) != 1 || d.Results[0].Outcome != OutcomeAllow {
		t.Fatalf("post decision = %+v", d)
	}
}

func TestRootGroupNotOverridable(t *testing.T) {
	e := newEnv(t)
	e.writeRoot(t, oneHook(cmdHook(`echo '{"decision":"deny","reason":"root gate"}'`, "")))
	// Same name "g": disabled, or replaced with an allow — both ignored.
	e.writeWS(t, `{"g": {"enabled": false, "pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "echo '{\"decision\":\"allow\"}'"}]}]},
		"extra": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "echo '{\"decision\":\"allow\"}'"}]}]}}`)
	h, ps := e.load(t)
	if len(ps) != 1 || ps[0].Severity != srcpos.SeverityWarning || ps[0].Line != 1 || !strings.Contains(ps[0].Msg, `group "g" is defined in `+filepath.Join(e.root, HooksFile)) {
		t.Fatalf("problems = %v", ps)
	}
	if len(h.Groups) != 2 || h.Groups[0].File != filepath.Join(e.root, HooksFile) || h.Groups[1].Name != "extra" {
		t.Fatalf("groups = %+v", h.Groups)
	}
	d := NewRunner(h, RunnerOptions{}).Run(ctxT(t), event(t, PreToolExecution, "x", `{}`))
	if !d.Denied() || d.Reason != "root gate" {
		t.Fatalf("decision = %+v", d)
	}
	// A workspace that is the root loads the file once.
	h2, ps2, err := Load(LoadOptions{Workspace: e.root, Root: e.root})
	if err != nil || len(ps2) != 0 || len(h2.Files) != 1 {
		t.Fatalf("workspace=root: files %v problems %v err %v", h2.Files, ps2, err)
	}
}

func TestChainDeadline(t *testing.T) {
	e := newEnv(t)
	slow := cmdHook(`sleep 30`, `, "timeout": 20`)
	e.writeWS(t, `{"a": {"pre_tool_execution": [{"matcher": "*", "hooks": [`+slow+`]}]},
		"b": {"pre_tool_execution": [{"matcher": "*", "hooks": [`+cmdHook("true", `, "on_failure": "deny"`)+`]}]}}`)
	r, logs := e.runner(t, RunnerOptions{Deadline: 300 * time.Millisecond, KillGrace: 50 * time.Millisecond})
	d := r.Run(ctxT(t), event(t, PreToolExecution, "x", `{}`))
	if len(d.Results) != 2 || d.Results[0].Outcome != OutcomeTimeout || d.Results[1].Outcome != OutcomeTimeout ||
		!strings.HasPrefix(d.Results[1].Detail, "not run") || !d.Denied() {
		t.Fatalf("decision = %+v", d)
	}
	if !strings.Contains(d.Results[0].Detail, "deadline of the hook chain") {
		t.Errorf("detail = %q", d.Results[0].Detail)
	}
	if n := len(logs.Lines(t)); n != 2 {
		t.Errorf("log lines = %d", n)
	}
}

func TestParseEvent(t *testing.T) {
	bad := []string{``, `[]`, `null`, `{}`, `{"tool_call": 1}`, `{"tool_call": {"name": ""}}`, `{"tool_call": {"name": 3}}`, `{"tool_call": {"args": {}}}`, `{"tool_call": {"name": "x"}`}
	for _, in := range bad {
		if _, err := ParseEvent(PreToolExecution, []byte(in), ""); err == nil {
			t.Errorf("ParseEvent(%q) accepted", in)
		}
	}
	ev, err := ParseEvent(PostToolExecution, []byte(` {"tool_call":{"name":"x","args":"any"},"environment_id":"keep","error":"boom"}`+"\n"), "other")
	if err != nil || ev.Tool != "x" || string(ev.Payload) != `{"tool_call":{"name":"x","args":"any"},"environment_id":"keep","error":"boom"}` {
		t.Fatalf("ev = %+v %s, err %v", ev, ev.Payload, err)
	}
	ev, err = NewEvent(PostToolExecution, "read_file", nil, "env", "no such file")
	if err != nil || string(ev.Payload) != `{"tool_call":{"name":"read_file","args":{}},"environment_id":"env","error":"no such file"}` {
		t.Fatalf("NewEvent = %s, %v", ev.Payload, err)
	}
}

// TestRunLoadProblems: load errors are logged on every run as their own
// outcome, and deny pre events only in fail-closed mode; warnings do
// neither.
func TestRunLoadProblems(t *testing.T) {
	errProblem := &srcpos.Error{Severity: srcpos.SeverityError, File: "/r/.agents/hooks.json", Line: 1, Column: 1, Msg: "the top level must be an object"}
	warning := &srcpos.Error{Severity: srcpos.SeverityWarning, File: "/w/.agents/hooks.json", Msg: "group has no hooks"}
	for _, tc := range []struct {
		name       string
		problems   srcpos.Errors
		failClosed bool
		kind       EventKind
		want       Verdict
		lines      int
	}{
		{"fail-open", srcpos.Errors{errProblem, warning}, false, PreToolExecution, Allow, 1},
		{"fail-closed", srcpos.Errors{errProblem, warning}, true, PreToolExecution, Deny, 1},
		{"post never denies", srcpos.Errors{errProblem}, true, PostToolExecution, Allow, 1},
		{"warnings only", srcpos.Errors{warning}, true, PreToolExecution, Allow, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logBuf strings.Builder
			r := NewRunner(&Hooks{}, RunnerOptions{Logger: zerolog.New(&logBuf), LoadProblems: tc.problems, FailClosedOnLoadError: tc.failClosed})
			ev, err := NewEvent(tc.kind, "code_execution", nil, "env", "")
			if err != nil {
				t.Fatal(err)
			}
			for run := 0; run < 2; run++ { // every run, not just the first
				logBuf.Reset()
				d := r.Run(context.Background(), ev)
				if d.Decision != tc.want {
					t.Fatalf("run %d: decision %+v, want %s", run, d, tc.want)
				}
				if tc.want == Deny && !strings.Contains(d.Reason, errProblem.Error()) {
					t.Errorf("reason %q does not name the problem", d.Reason)
				}
				if n := strings.Count(logBuf.String(), `"outcome":"load-error"`); n != tc.lines {
					t.Errorf("run %d: %d load-error lines, want %d:\n%s", run, n, tc.lines, logBuf.String())
				}
			}
		})
	}
}
