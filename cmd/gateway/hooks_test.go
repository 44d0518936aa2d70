package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func hooksEnv(t *testing.T, root, ws string) (string, string) {
	t.Helper()
	r, w := t.TempDir(), t.TempDir()
	for dir, content := range map[string]string{r: root, w: ws} {
		if content == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, ".agents"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".agents", "hooks.json"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return r, w
}

func runHooksCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	err := run(ctx, append([]string{"hooks"}, args...), strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), exitCode(err, &errb)
}

const gateHooks = `{"gate": {"pre_tool_execution": [{"matcher": "code_execution", "hooks": [
  {"command": "grep -q 'rm -rf' && echo '{\"decision\":\"deny\",\"reason\":\"no rm -rf\"}' || echo '{\"decision\":\"allow\"}'"}]}]},
 "seen": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "cat > seen.json; echo '{}'"}]}]}}`

func TestHooksRun(t *testing.T) {
	root, ws := hooksEnv(t, gateHooks, "")
	args := []string{"run", "pre_tool_execution", "--root", root, "--workspace", ws, "--environment-id", "env_cli"}

	out, errOut, code := runHooksCLI(t, `{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /"}}}`, args...)
	if code != 2 || strings.TrimSpace(out) != `{"decision":"deny","reason":"no rm -rf"}` {
		t.Fatalf("deny: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// One log line per handler on stderr: the gate (deny) and "seen"
	// (answers {}: a bad-response, fail-open).
	var outcomes []string
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stderr line not JSON: %q", l)
		}
		outcomes = append(outcomes, m["group"].(string)+"="+m["outcome"].(string)+"/"+m["effect"].(string))
	}
	if got := strings.Join(outcomes, " "); got != "gate=deny/deny seen=bad-response/fail-open" {
		t.Errorf("log outcomes = %s", got)
	}
	seen, _ := os.ReadFile(filepath.Join(ws, "seen.json"))
	if string(seen) != `{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /"}},"environment_id":"env_cli"}` {
		t.Errorf("event passed to handler = %s", seen)
	}

	out, errOut, code = runHooksCLI(t, `{"tool_call": {"name": "code_execution", "args": {"code": "ls"}}, "environment_id": "e"}`, args...)
	if code != 0 || strings.TrimSpace(out) != `{"decision":"allow"}` {
		t.Fatalf("allow: code %d, stdout %q, stderr %q", code, out, errOut)
	}

	// Post events never deny.
	post := append([]string{"run", "post_tool_execution"}, args[2:]...)
	out, _, code = runHooksCLI(t, `{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /"}}, "error": "x"}`, post...)
	if code != 0 || strings.TrimSpace(out) != `{"decision":"allow"}` {
		t.Fatalf("post: code %d, stdout %q", code, out)
	}
}

func TestHooksRunUsageErrors(t *testing.T) {
	root, ws := hooksEnv(t, "", "")
	// Exit 2 means deny for `hooks run`: its usage errors exit 1, with no
	// decision on stdout.
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
	}{
		{`{}`, []string{"run", "pre_tool_execution", "--root", root, "--workspace", ws}, 1},
		{`not json`, []string{"run", "pre_tool_execution", "--root", root, "--workspace", ws}, 1},
		{`{"tool_call": {"name": "x"}}`, []string{"run", "PreToolUse", "--root", root}, 1},
		{`{"tool_call": {"name": "x"}}`, []string{"run", "--root", root}, 1},
		{`{"tool_call": {"name": "x"}}`, []string{"run", "pre_tool_execution", "--bogus"}, 1},
		{``, []string{"frobnicate"}, 2},
		{``, nil, 2},
	} {
		out, _, code := runHooksCLI(t, tc.stdin, tc.args...)
		if code != tc.code || out != "" && tc.code == 1 {
			t.Errorf("hooks %v: exit %d, stdout %q; want exit %d", tc.args, code, out, tc.code)
		}
	}
	// No hooks at all: allow.
	out, _, code := runHooksCLI(t, `{"tool_call": {"name": "x"}}`, "run", "pre_tool_execution", "--root", root, "--workspace", ws)
	if code != 0 || strings.TrimSpace(out) != `{"decision":"allow"}` {
		t.Errorf("no hooks: exit %d, %q", code, out)
	}
}

func TestHooksCheck(t *testing.T) {
	root, ws := hooksEnv(t, gateHooks, `{"gate": {"enabled": false},
  "files": {"post_tool_execution": [{"matcher": "*_file", "hooks": [{"type": "http", "url": "https://audit.example/e", "headers": {"X-Event-Source": "sb"}, "on_failure": "deny"}]}]}}`)
	out, errOut, code := runHooksCLI(t, "", "check", "--root", root, "--workspace", ws)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (invalid matcher)\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		`group "gate" (enabled)`,
		`pre_tool_execution  matcher "code_execution"`,
		`matcher "*" (every tool)`,
		`group "files" (enabled)`,
		`post_tool_execution  matcher "*_file" (INVALID: matches nothing)`,
		`http POST https://audit.example/e headers X-Event-Source  timeout 30s  on_failure deny`,
		`warning: gate: group "gate" is defined in ` + filepath.Join(root, ".agents", "hooks.json"),
		`:2:49: error: files.post_tool_execution[0].matcher: invalid RE2 pattern "*_file"`,
		`did you mean ".*_file"?`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	// Clean files: exit 0.
	root2, ws2 := hooksEnv(t, gateHooks, "")
	if out, _, code := runHooksCLI(t, "", "check", "--root", root2, "--workspace", ws2); code != 0 {
		t.Errorf("clean check: exit %d\n%s", code, out)
	}
}
