package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/policy"
)

// logLineOf returns the stderr log line of the handler of type typ.
func logLineOf(t *testing.T, stderr, typ string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["handler_type"] == typ {
			return m
		}
	}
	t.Fatalf("no %s handler line in:\n%s", typ, stderr)
	return nil
}

// TestHooksRunPolicyHandler: `hooks run` with a policy handler, in process:
// the example policy of configs/policy beside the in-process example
// hooks.json in the root, for a CLI agent (ask is native) and a remote
// sandbox calling it; then a remote-sandbox file, whose ask goes to the
// approver.
func TestHooksRunPolicyHandler(t *testing.T) {
	hooksJSON, err := os.ReadFile("../../configs/policy/hooks-inprocess.json")
	if err != nil {
		t.Fatal(err)
	}
	policyYAML, err := os.ReadFile("../../configs/policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	root, ws := hooksEnv(t, string(hooksJSON), "")
	policyFile := filepath.Join(root, ".agents", "policy.yaml")
	writeTestFile(t, policyFile, string(policyYAML))
	where := []string{"--root", root, "--workspace", ws, "--global", ""}

	for _, tc := range []struct {
		event, body string
		code        int
		decision    string
		rule        string // the level's name
	}{
		{"PreToolUse", `{"toolCall": {"name": "run_command", "args": {"CommandLine": "rm -rf /"}}}`, 2, "deny", "tool deny"},
		{"PreToolUse", `{"toolCall": {"name": "run_command", "args": {"CommandLine": "npm test"}}}`, 0, "ask", "tool ask"},
		{"PreToolUse", `{"toolCall": {"name": "view_file", "args": {"AbsolutePath": "/workspace/README.md"}}}`, 0, "allow", "default"},
		{"pre_tool_execution", `{"tool_call": {"name": "write_file", "args": {"path": "/workspace-evil/x"}}}`, 2, "deny", "tool deny"},
		{"pre_tool_execution", `{"tool_call": {"name": "read_file", "args": {"path": "/workspace/a.go"}}}`, 0, "allow", "default"},
	} {
		out, errOut, code := runHooksCLI(t, tc.body, append([]string{"run", tc.event}, where...)...)
		var answer struct{ Decision, Reason string }
		if err := json.Unmarshal([]byte(out), &answer); err != nil || code != tc.code || answer.Decision != tc.decision {
			t.Errorf("%s %s: exit %d, %s\n%s", tc.event, tc.body, code, out, errOut)
			continue
		}
		l := logLineOf(t, errOut, "policy")
		if l["policy"] != policyFile || l["rule_kind"] != tc.rule || (tc.rule != "default" && !strings.HasPrefix(l["rule"].(string), policyFile+":")) {
			t.Errorf("%s %s: log line %v", tc.event, tc.body, l)
		}
	}

	// A remote-sandbox file's ask goes to the approver, which cannot be
	// reached (all HTTP goes to a closed loopback port): the ask is a deny
	// "needs approval".
	root, ws = hooksEnv(t, `{"gate": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"type": "policy", "file": "policy.yaml"}]}]}}`, "")
	policyFile = filepath.Join(root, ".agents", "policy.yaml")
	writeTestFile(t, policyFile, string(policyYAML))
	out, errOut, code := runHooksCLI(t, `{"tool_call": {"name": "code_execution", "args": {"code": "make"}}}`,
		"run", "pre_tool_execution", "--proxy", "http://127.0.0.1:1", "--root", root, "--workspace", ws, "--global", "")
	if code != 2 || !strings.Contains(out, `"reason":"needs approval`) {
		t.Fatalf("remote ask: exit %d, %s\n%s", code, out, errOut)
	}
	if l := logLineOf(t, errOut, "policy"); l["approver"] != "connect-error" || l["rule_kind"] != "tool ask" {
		t.Fatalf("remote ask: log line %v", l)
	}
}

// TestHooksRunBrokenPolicy: a policy that does not load makes `hooks run`
// deny (exit 2) with the load error, and `hooks check` report it.
func TestHooksRunBrokenPolicy(t *testing.T) {
	root, ws := hooksEnv(t, "", `{"gate": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"type": "policy", "file": "p.yaml"}]}]}}`)
	writeTestFile(t, filepath.Join(ws, ".agents", "p.yaml"), "rules:\n  - allow: read_file\n    when: 'args.path.startsWith('\n")
	where := []string{"--root", root, "--workspace", ws, "--global", ""}
	out, errOut, code := runHooksCLI(t, `{"tool_call": {"name": "read_file", "args": {"path": "/w/a"}}}`, append([]string{"run", "pre_tool_execution"}, where...)...)
	if code != 2 || !strings.Contains(out, "did not load") || !strings.Contains(out, "p.yaml:3") {
		t.Fatalf("broken policy: exit %d, %s\n%s", code, out, errOut)
	}
	out, _, code = runHooksCLI(t, "", append([]string{"check"}, where...)...)
	if code != 1 || !strings.Contains(out, "p.yaml:3") || !strings.Contains(out, "hooks.json:1") {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
}

// TestHooksCheckRequireGate: --require-gate fails, naming them, while
// write or execution tools have no enabled pre-tool handler matching them.
func TestHooksCheckRequireGate(t *testing.T) {
	all := policy.WriteAndExecTools()
	policyHook := `{"type": "policy", "file": "p.yaml"}`
	for _, tc := range []struct {
		name, hooks string
		ungated     []string // nil: passes
	}{
		{"no hooks.json", "", all},
		{"post hooks only", `{"audit": {"post_tool_execution": [{"matcher": "*", "hooks": [{"command": "cat >/dev/null"}]}]}}`, all},
		{"code_execution only", `{"gate": {"pre_tool_execution": [{"matcher": "code_execution", "hooks": [` + policyHook + `]}]}}`,
			without(all, "code_execution")},
		{"policy on *", `{"gate": {"pre_tool_execution": [{"matcher": "*", "hooks": [` + policyHook + `]}]}}`, nil},
		{"CLI command gate on every tool", `{"gate": {"PreToolUse": [{"matcher": ".*", "hooks": [{"command": "echo '{\"decision\": \"allow\"}'"}]}]}}`, nil},
		{"disabled gate", `{"gate": {"enabled": false, "pre_tool_execution": [{"matcher": "*", "hooks": [` + policyHook + `]}]}}`, all},
		{"rule without handlers", `{"gate": {"PreToolUse": [{"matcher": "*", "hooks": []}]}}`, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, ws := hooksEnv(t, "", tc.hooks)
			writeTestFile(t, filepath.Join(ws, ".agents", "p.yaml"), "presets: [deny_all]\n")
			where := []string{"--root", root, "--workspace", ws, "--global", ""}
			// Without the flag a file that loads passes.
			if _, errOut, code := runHooksCLI(t, "", append([]string{"check"}, where...)...); code != 0 {
				t.Fatalf("check without --require-gate: exit %d\n%s", code, errOut)
			}
			out, errOut, code := runHooksCLI(t, "", append([]string{"check", "--require-gate"}, where...)...)
			if tc.ungated == nil {
				if code != 0 {
					t.Fatalf("exit %d\n%s%s", code, out, errOut)
				}
				return
			}
			if code != 1 || !strings.Contains(errOut, "no pre-tool gate: "+strings.Join(tc.ungated, ", ")+" (") {
				t.Fatalf("exit %d, want 1 naming %v\n%s", code, tc.ungated, errOut)
			}
		})
	}

	// The examples of configs/policy each gate every tool.
	for _, name := range []string{"hooks.json", "hooks-inprocess.json"} {
		data, err := os.ReadFile(filepath.Join("../../configs/policy", name))
		if err != nil {
			t.Fatal(err)
		}
		root, ws := hooksEnv(t, string(data), "")
		policyYAML, _ := os.ReadFile("../../configs/policy/policy.yaml")
		writeTestFile(t, filepath.Join(root, ".agents", "policy.yaml"), string(policyYAML))
		if out, errOut, code := runHooksCLI(t, "", "check", "--require-gate", "--root", root, "--workspace", ws, "--global", ""); code != 0 {
			t.Errorf("configs/policy/%s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
}

func without(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
