package hooks

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/testlog"
)

// The examples of the agent-CLI reference, as the caller sends them.
const (
	commonFields = `"conversationId": "ec33ebf9-0cba-4100-8142-c61503f6c587",
  "workspacePaths": ["/workspace/project"],
  "transcriptPath": "~/.gemini/antigravity/brain/ec33ebf9-0cba-4100-8142-c61503f6c587/.system_generated/logs/transcript.jsonl",
  "artifactDirectoryPath": "~/.gemini/antigravity/brain/ec33ebf9-0cba-4100-8142-c61503f6c587",
  "modelName": "gemini-3.6-flash-medium"`
	exSessionStart = `{` + commonFields + `}`
	exPreToolUse   = `{"toolCall": {"name": "run_command", "args": {"CommandLine": "npm test", "Cwd": "/workspace/project", "WaitMsBeforeAsync": 5000}},
  "stepIdx": 19, ` + commonFields + `}`
	exPostToolUse = `{"toolCall": {"name": "run_command", "args": {"CommandLine": "npm test", "Cwd": "/workspace/project", "WaitMsBeforeAsync": 5000}},
  "stepIdx": 5, "error": "exit status 1", ` + commonFields + `}`
	exPreInvocation = `{"invocationNum": 3, "initialNumSteps": 10, ` + commonFields + `, "lastUserInput": "Fix the failing unit test"}`
	exStop          = `{"executionNum": 1, "terminationReason": "model_stop", "error": "", "fullyIdle": true, ` + commonFields + `}`
)

// echoHook is a command handler that answers out, whatever it is sent.
func echoHook(out string) string {
	return cmdHook("cat >/dev/null; echo '"+out+"'", "")
}

// group is one hooks.json group holding handlers for event: a plain list,
// or one rule with matcher "*" for tool events.
func group(name string, kind EventKind, handlers ...string) string {
	list := "[" + strings.Join(handlers, ",") + "]"
	if kind.HasTool() {
		list = `[{"matcher": "*", "hooks": ` + list + `}]`
	}
	return fmt.Sprintf("%q: {%q: %s}", name, kind, list)
}

func file(groups ...string) string { return "{" + strings.Join(groups, ",\n") + "}" }

func parseEv(t *testing.T, kind EventKind, payload string) Event {
	t.Helper()
	ev, err := ParseEvent(kind, []byte(payload), "")
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// jsonEqual compares two JSON texts as values.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("output = %s\nwant     %s", got, want)
	}
}

func runCLI(t *testing.T, e env, kind EventKind, payload string) (Decision, *testlog.Buffer) {
	t.Helper()
	r, logs := e.runner(t, RunnerOptions{})
	return r.Run(ctxT(t), parseEv(t, kind, payload)), logs
}

// TestCLIReferenceFile: the reference's hooks.json loads as written and its
// hooks run: the linter on PostToolUse (gets the payload, output
// ignored), the disabled safety gate (never runs), the PreInvocation
// reminder, the SessionStart init.
func TestCLIReferenceFile(t *testing.T) {
	needPython(t)
	e := newEnv(t)
	data, err := os.ReadFile(filepath.Join("testdata", "cli-reference-hooks.json"))
	if err != nil {
		t.Fatal(err)
	}
	e.writeWS(t, string(data))
	scripts := map[string]string{
		"lint.sh":         "cat > lint-input.json; echo '{\"ignored\": true}'",
		"safety-check.sh": "touch safety-ran; echo '{\"decision\": \"deny\"}'",
		"reminder.sh":     `echo '{"injectSteps": [{"ephemeralMessage": "Remember to lint"}]}'`,
		"init-env.sh": `python3 -c 'import json,sys; d=json.load(sys.stdin)
print(json.dumps({"injectSteps": [{"systemMessage": {"systemMessage": "Environment initialized for workspace " + d["workspacePaths"][0]}}]}))'`,
	}
	for name, body := range scripts {
		p := filepath.Join(e.ws, "scripts", name)
		writeFile(t, p, "#!/bin/sh\n"+body+"\n")
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h, problems := e.load(t)
	if len(problems) > 0 {
		t.Fatalf("the reference hooks.json has problems: %v", problems)
	}
	if len(h.Groups) != 4 || h.Groups[0].Dialect != DialectCLI || h.Groups[1].Enabled {
		t.Fatalf("groups = %+v", h.Groups)
	}
	if h.Groups[0].Rules[PostToolUse][0].Handlers[0].Timeout.Seconds() != 10 || h.Groups[2].Rules[PreInvocation][0].Handlers[0].Timeout.Seconds() != 30 {
		t.Fatal("timeouts: want the declared 10 s and the default 30 s")
	}

	d, _ := runCLI(t, e, SessionStart, exSessionStart)
	out, _ := json.Marshal(d)
	jsonEqual(t, out, `{"injectSteps": [{"systemMessage": {"systemMessage": "Environment initialized for workspace /workspace/project"}}]}`)

	d, _ = runCLI(t, e, PreInvocation, exPreInvocation)
	out, _ = json.Marshal(d)
	jsonEqual(t, out, `{"injectSteps": [{"ephemeralMessage": "Remember to lint"}], "terminationBehavior": ""}`)

	d, _ = runCLI(t, e, PreToolUse, exPreToolUse)
	if len(d.Results) != 0 || d.Decision != Allow {
		t.Fatalf("the disabled safety gate ran: %+v", d)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "safety-ran")); err == nil {
		t.Fatal("the disabled safety gate ran")
	}

	d, _ = runCLI(t, e, PostToolUse, exPostToolUse)
	out, _ = json.Marshal(d)
	if string(out) != "{}" || len(d.Results) != 1 {
		t.Fatalf("PostToolUse: %s %+v", out, d.Results)
	}
	got, err := os.ReadFile(filepath.Join(e.ws, "lint-input.json"))
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, got, exPostToolUse)
}

// TestCLIExampleOutputs: every event's example input, answered by a hook
// that gives the example answer, yields the example output.
func TestCLIExampleOutputs(t *testing.T) {
	cases := []struct {
		kind         EventKind
		input        string
		answer, want string
	}{
		{SessionStart, exSessionStart,
			`{"injectSteps": [{"systemMessage": {"systemMessage": "Environment initialized for workspace /workspace/project"}}]}`,
			`{"injectSteps": [{"systemMessage": {"systemMessage": "Environment initialized for workspace /workspace/project"}}]}`},
		{PreToolUse, exPreToolUse,
			`{"decision": "ask", "reason": "Requires confirmation for test execution.", "permissionOverrides": ["command(npm test)"]}`,
			`{"decision": "ask", "reason": "Requires confirmation for test execution.", "permissionOverrides": ["command(npm test)"]}`},
		{PostToolUse, exPostToolUse, `{}`, `{}`},
		{PreInvocation, exPreInvocation, `{"injectSteps": [{"ephemeralMessage": "Remember to lint"}]}`,
			`{"injectSteps": [{"ephemeralMessage": "Remember to lint"}], "terminationBehavior": ""}`},
		{PreInvocation, exPreInvocation,
			`{"injectSteps": [{"errorMessage": {"userMessage": "Prompt blocked by policy."}}], "terminationBehavior": "terminate"}`,
			`{"injectSteps": [{"errorMessage": {"userMessage": "Prompt blocked by policy."}}], "terminationBehavior": "terminate"}`},
		{PostInvocation, exPreInvocation, `{"injectSteps": [], "terminationBehavior": ""}`, `{"injectSteps": [], "terminationBehavior": ""}`},
		{Stop, exStop, `{"decision": "continue", "reason": "Not done yet"}`, `{"decision": "continue", "reason": "Not done yet"}`},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			e := newEnv(t)
			e.writeWS(t, file(group("g", tc.kind, echoHook(tc.answer))))
			d, _ := runCLI(t, e, tc.kind, tc.input)
			if len(d.Results) != 1 || d.Results[0].Outcome.Failed() {
				t.Fatalf("results = %+v", d.Results)
			}
			out, _ := json.Marshal(d)
			jsonEqual(t, out, tc.want)
		})
	}
}

var verdicts = []Verdict{Allow, AutoApprove, Ask, ForceAsk, DenyUnlessPriorGrant, Deny}

// TestCLIDecisionPairs: each PreToolUse decision alone, and every ordered
// pair: the strictest wins, reasons of the winning level joined, a deny
// ends the chain.
func TestCLIDecisionPairs(t *testing.T) {
	answer := func(v Verdict, who string) string {
		return echoHook(fmt.Sprintf(`{"decision": %q, "reason": "%s says %s"}`, v, who, v))
	}
	for _, a := range verdicts {
		t.Run(string(a), func(t *testing.T) {
			e := newEnv(t)
			e.writeWS(t, file(group("a", PreToolUse, answer(a, "a"))))
			d, _ := runCLI(t, e, PreToolUse, exPreToolUse)
			if d.Decision != a || d.Reason != fmt.Sprintf("a says %s", a) || d.Denied() != (a == Deny) {
				t.Fatalf("decision = %s %q", d.Decision, d.Reason)
			}
		})
		for _, b := range verdicts {
			t.Run(string(a)+"+"+string(b), func(t *testing.T) {
				e := newEnv(t)
				e.writeWS(t, file(group("a", PreToolUse, answer(a, "a")), group("b", PreToolUse, answer(b, "b"))))
				d, _ := runCLI(t, e, PreToolUse, exPreToolUse)
				want, reason := a, "a says "+string(a)
				switch {
				case a == Deny:
					if len(d.Results) != 1 {
						t.Fatalf("a deny must end the chain; ran %d handlers", len(d.Results))
					}
				case b.strictness() > a.strictness():
					want, reason = b, "b says "+string(b)
				case a == b:
					reason += "; b says " + string(b)
				}
				if d.Decision != want || d.Reason != reason {
					t.Fatalf("decision = %s %q, want %s %q", d.Decision, d.Reason, want, reason)
				}
			})
		}
	}
}

// TestCLIOverwriteChaining: the second handler sees the args as the first
// rewrote them; the output carries the merged overwrite and its keys.
func TestCLIOverwriteChaining(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, file(
		group("first", PreToolUse, echoHook(`{"decision": "allow", "overwrite": {"CommandLine": "npm test -- --ci", "Env": {"CI": "1"}}, "permissionOverrides": ["command(npm test)"]}`)),
		group("second", PreToolUse, cmdHook(`cat > second.json; echo '{"decision": "auto_approve", "overwrite": {"Cwd": "/workspace/project/sub"}, "permissionOverrides": ["command(npm test)", "read_file(/x)"]}'`, "")),
		group("third", PreToolUse, cmdHook(`cat > third.json; echo '{"decision": "allow"}'`, "")),
	))
	d, _ := runCLI(t, e, PreToolUse, exPreToolUse)
	out, _ := json.Marshal(d)
	jsonEqual(t, out, `{"decision": "auto_approve", "overwrite": {"CommandLine": "npm test -- --ci", "Env": {"CI": "1"}, "Cwd": "/workspace/project/sub"},
		"overwrittenKeys": ["CommandLine", "Env", "Cwd"], "permissionOverrides": ["command(npm test)", "read_file(/x)"]}`)
	second, _ := os.ReadFile(filepath.Join(e.ws, "second.json"))
	var ev struct {
		ToolCall struct{ Args map[string]any } `json:"toolCall"`
		StepIdx  int                           `json:"stepIdx"`
	}
	if err := json.Unmarshal(second, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.ToolCall.Args["CommandLine"] != "npm test -- --ci" || ev.ToolCall.Args["Cwd"] != "/workspace/project" || ev.StepIdx != 19 {
		t.Fatalf("second handler saw %s", second)
	}
	third, _ := os.ReadFile(filepath.Join(e.ws, "third.json"))
	if !strings.Contains(string(third), `"args": {"CommandLine":"npm test -- --ci","Cwd":"/workspace/project/sub","WaitMsBeforeAsync":5000,"Env":{"CI":"1"}}}`) {
		t.Fatalf("third handler saw %s", third)
	}
}

// TestCLIDenyStopsChain: after a deny no handler runs, in this group or
// the next.
func TestCLIDenyStopsChain(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, file(
		group("gate", PreToolUse, echoHook(`{"decision": "deny", "reason": "no"}`), cmdHook("touch same-group", "")),
		group("later", PreToolUse, cmdHook("touch next-group", "")),
	))
	d, _ := runCLI(t, e, PreToolUse, exPreToolUse)
	if !d.Denied() || d.Reason != "no" || len(d.Results) != 1 {
		t.Fatalf("decision = %+v", d)
	}
	for _, f := range []string{"same-group", "next-group"} {
		if _, err := os.Stat(filepath.Join(e.ws, f)); err == nil {
			t.Errorf("%s ran after the deny", f)
		}
	}
}

// TestCLIInjectSteps: valid steps are concatenated in order; a handler
// with one bad step is a bad-response and adds nothing; the strongest
// terminationBehavior wins; PreInvocation has no force_continue.
func TestCLIInjectSteps(t *testing.T) {
	bad := []struct{ name, answer, detail string }{
		{"step not an object", `{"injectSteps": ["hi"]}`, "injectSteps[1]: not an object"},
		{"systemMessage string", `{"injectSteps": [{"systemMessage": "hi"}]}`, `"systemMessage" must be an object`},
		{"userMessage object", `{"injectSteps": [{"userMessage": {}}]}`, `"userMessage" must be a string`},
		{"ephemeralMessage number", `{"injectSteps": [{"ephemeralMessage": 1}]}`, `"ephemeralMessage" must be a string`},
		{"errorMessage string", `{"injectSteps": [{"errorMessage": "x"}]}`, `"errorMessage" must be an object`},
		{"unknown step", `{"injectSteps": [{"assistantMessage": "x"}]}`, `unknown step "assistantMessage"`},
		{"two kinds in a step", `{"injectSteps": [{"userMessage": "a", "ephemeralMessage": "b"}]}`, "has 2 fields"},
		{"not a list", `{"injectSteps": {}}`, `"injectSteps" is not a list`},
		{"pre force_continue", `{"terminationBehavior": "force_continue"}`, `"terminationBehavior" is "force_continue"`},
		{"termination typo", `{"terminationBehavior": "stop"}`, `"terminationBehavior" is "stop"`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.writeWS(t, file(group("g", PreInvocation,
				echoHook(`{"injectSteps": [{"userMessage": "kept"}]}`),
				echoHook(strings.Replace(tc.answer, `"injectSteps": [`, `"injectSteps": [{"userMessage": "dropped"}, `, 1)))))
			d, logs := runCLI(t, e, PreInvocation, exPreInvocation)
			res := d.Results[1]
			if res.Outcome != OutcomeBadResponse || !strings.Contains(res.Detail, tc.detail) {
				t.Fatalf("outcome = %s %q, want bad-response containing %q", res.Outcome, res.Detail, tc.detail)
			}
			out, _ := json.Marshal(d)
			jsonEqual(t, out, `{"injectSteps": [{"userMessage": "kept"}], "terminationBehavior": ""}`)
			if l := logs.Lines(t); l[1][fieldEffect] != "fail-open" {
				t.Errorf("log line = %v", l[1])
			}
		})
	}
	t.Run("concatenated, strongest termination", func(t *testing.T) {
		e := newEnv(t)
		e.writeWS(t, file(
			group("a", PostInvocation, echoHook(`{"injectSteps": [{"userMessage": "1"}, {"systemMessage": {"systemMessage": "2"}}], "terminationBehavior": "force_continue"}`)),
			group("b", PostInvocation, echoHook(`{"injectSteps": [{"ephemeralMessage": "3"}], "terminationBehavior": "terminate"}`),
				echoHook(`{"injectSteps": [{"errorMessage": {"userMessage": "4"}}], "terminationBehavior": ""}`)),
		))
		d, _ := runCLI(t, e, PostInvocation, exPreInvocation)
		out, _ := json.Marshal(d)
		jsonEqual(t, out, `{"injectSteps": [{"userMessage": "1"}, {"systemMessage": {"systemMessage": "2"}}, {"ephemeralMessage": "3"}, {"errorMessage": {"userMessage": "4"}}], "terminationBehavior": "terminate"}`)
	})
	t.Run("force_continue beats none", func(t *testing.T) {
		e := newEnv(t)
		e.writeWS(t, file(group("a", PostInvocation, echoHook(`{}`), echoHook(`{"terminationBehavior": "force_continue"}`))))
		d, _ := runCLI(t, e, PostInvocation, exPreInvocation)
		if d.TerminationBehavior != "force_continue" {
			t.Fatalf("terminationBehavior = %q", d.TerminationBehavior)
		}
	})
}

// TestCLIStop: continue when any handler says so, with the reasons of
// those that did; stop otherwise.
func TestCLIStop(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, file(group("g", Stop,
		echoHook(`{"decision": "allow", "reason": "ignored"}`),
		echoHook(`{"decision": "continue", "reason": "Not done yet"}`),
		echoHook(`{"decision": "continue", "reason": "tests still fail"}`))))
	d, _ := runCLI(t, e, Stop, exStop)
	out, _ := json.Marshal(d)
	jsonEqual(t, out, `{"decision": "continue", "reason": "Not done yet; tests still fail"}`)

	e = newEnv(t)
	e.writeWS(t, file(group("g", Stop, echoHook(`{"decision": "stop"}`), echoHook(`{"decision": "whatever", "reason": "x"}`))))
	d, _ = runCLI(t, e, Stop, exStop)
	out, _ = json.Marshal(d)
	jsonEqual(t, out, `{"decision": "stop"}`)
}
