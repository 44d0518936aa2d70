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
	code := exitCode(err, &errb) // first: it writes the error to errb
	return out.String(), errb.String(), code
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

// A gate written in another tool's shape: a top-level list. It does not
// load, so nothing would guard code_execution.
const wrongShapeHooks = `[{"matcher": "code_execution", "hooks": [{"command": "echo '{\"decision\":\"deny\"}'"}]}]`

// stderrLines parses the JSON log lines of `hooks run`.
func stderrLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stderr line not JSON: %q", l)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestHooksRunLoadErrors: a hooks.json that does not load is reported on
// stderr on every run as a load-error line, whatever the log level; by
// default the run then allows (fail-open, said so); --strict or
// HOOKGATE_HOOKS_STRICT=1 make it deny.
func TestHooksRunLoadErrors(t *testing.T) {
	root, ws := hooksEnv(t, wrongShapeHooks, "")
	event := `{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /"}}}`
	base := []string{"run", "pre_tool_execution", "--root", root, "--workspace", ws}
	rootFile := filepath.Join(root, ".agents", "hooks.json")

	for _, tc := range []struct {
		name   string
		args   []string
		env    string // HOOKGATE_HOOKS_STRICT
		code   int
		effect string
	}{
		{"default", base, "", 0, "fail-open"},
		{"log level disabled", append(base, "--log-level", "disabled"), "", 0, "fail-open"},
		{"--strict", append(base, "--strict"), "", 2, "fail-closed"},
		{"env", base, "1", 2, "fail-closed"},
		{"env, flag says no", append(base, "--strict=false"), "1", 0, "fail-open"},
		{"post event", append([]string{"run", "post_tool_execution"}, append(base[2:], "--strict")...), "", 0, "ignored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOOKGATE_HOOKS_STRICT", tc.env)
			out, errOut, code := runHooksCLI(t, event, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q, stderr %q", code, tc.code, out, errOut)
			}
			var d struct{ Decision, Reason string }
			if err := json.Unmarshal([]byte(out), &d); err != nil {
				t.Fatalf("stdout %q: %v", out, err)
			}
			if tc.code == 2 && (d.Decision != "deny" || !strings.Contains(d.Reason, "hooks.json did not load") || !strings.Contains(d.Reason, rootFile)) {
				t.Errorf("decision %+v", d)
			}
			var loadLines int
			for _, l := range stderrLines(t, errOut) {
				if l["outcome"] != "load-error" {
					continue
				}
				loadLines++
				if l["effect"] != tc.effect || !strings.Contains(l["detail"].(string), rootFile+":1:1: error: the top level must be an object") {
					t.Errorf("load-error line %v, want effect %s and the problem", l, tc.effect)
				}
			}
			if loadLines != 1 {
				t.Errorf("%d load-error lines, want 1:\n%s", loadLines, errOut)
			}
		})
	}

	t.Run("unreadable file", func(t *testing.T) {
		root, ws := hooksEnv(t, "", "")
		if err := os.MkdirAll(filepath.Join(root, ".agents", "hooks.json"), 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"run", "pre_tool_execution", "--root", root, "--workspace", ws}
		if out, errOut, code := runHooksCLI(t, event, args...); code != 1 || out != "" {
			t.Errorf("default: exit %d, stdout %q, stderr %q; want exit 1", code, out, errOut)
		}
		out, errOut, code := runHooksCLI(t, event, append(args, "--strict")...)
		if code != 2 || !strings.Contains(out, `"decision":"deny"`) || !strings.Contains(errOut, "load-error") {
			t.Errorf("strict: exit %d, stdout %q, stderr %q; want a deny", code, out, errOut)
		}
	})

	t.Run("bad env value", func(t *testing.T) {
		t.Setenv("HOOKGATE_HOOKS_STRICT", "maybe")
		_, errOut, code := runHooksCLI(t, event, base...)
		if code != 1 || !strings.Contains(errOut, `HOOKGATE_HOOKS_STRICT="maybe"`) {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

func TestHooksRunHelpNamesEvent(t *testing.T) {
	_, errOut, code := runHooksCLI(t, "", "run", "--help")
	if code != 0 || !strings.Contains(errOut, "usage: gateway hooks run EVENT [flags]") || !strings.Contains(errOut, "pre_tool_execution or") || !strings.Contains(errOut, "-strict") {
		t.Fatalf("exit %d, help:\n%s", code, errOut)
	}
}

// TestHooksCheckMissingRoot: check says where it looked, and warns when the
// root directory itself is missing.
func TestHooksCheckMissingRoot(t *testing.T) {
	_, ws := hooksEnv(t, "", gateHooks)
	root := filepath.Join(t.TempDir(), "no-such-root")
	out, errOut, code := runHooksCLI(t, "", "check", "--root", root, "--workspace", ws)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		filepath.Join(root, ".agents", "hooks.json") + "  (not found)",
		filepath.Join(ws, ".agents", "hooks.json") + "  (loaded)",
		"the root directory " + root + " does not exist",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	_, ws2 := hooksEnv(t, "", "")
	out, _, _ = runHooksCLI(t, "", "check", "--root", root, "--workspace", ws2)
	if !strings.Contains(out, filepath.Join(root, ".agents", "hooks.json")+"  (not found)") || !strings.Contains(out, "no hooks.json found") {
		t.Errorf("no files: check output:\n%s", out)
	}
}
