package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHooksEnableDisableGolden: enable|disable change the flag and nothing
// else in the file: layout, key order, line endings are kept byte for byte.
func TestHooksEnableDisableGolden(t *testing.T) {
	cases := []struct{ input, verb, group string }{
		{"reference", "disable", "reminder"},
		{"reference", "enable", "safety-gate"},
		{"compact", "disable", "a"},
		{"compact", "disable", "b"},
		{"compact", "disable", "c"},
		{"crlf-tabs", "disable", "g"},
		{"crlf-tabs", "enable", "h"},
	}
	dir := filepath.Join("testdata", "hooks-enable")
	for _, tc := range cases {
		t.Run(tc.input+"/"+tc.verb+"-"+tc.group, func(t *testing.T) {
			input, err := os.ReadFile(filepath.Join(dir, tc.input+".json"))
			if err != nil {
				t.Fatal(err)
			}
			golden, err := os.ReadFile(filepath.Join(dir, tc.input+"."+tc.verb+"-"+tc.group+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			root, ws := hooksEnv(t, "", string(input))
			path := filepath.Join(ws, ".agents", "hooks.json")
			if err := os.Chmod(path, 0o640); err != nil {
				t.Fatal(err)
			}
			args := []string{tc.verb, tc.group, "--root", root, "--workspace", ws, "--global", ""}
			out, errOut, code := runHooksCLI(t, "", args...)
			if code != 0 || !strings.Contains(out, tc.verb+"d") {
				t.Fatalf("exit %d: %s%s", code, out, errOut)
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, golden) {
				t.Fatalf("file after %s %s:\n%q\nwant:\n%q", tc.verb, tc.group, got, golden)
			}
			if info, _ := os.Stat(path); info.Mode().Perm() != 0o640 {
				t.Errorf("mode = %v", info.Mode())
			}
			// Again: nothing to change, nothing changed.
			out, _, code = runHooksCLI(t, "", args...)
			if again, _ := os.ReadFile(path); code != 0 || !strings.Contains(out, "already") || !bytes.Equal(again, golden) {
				t.Fatalf("second %s: exit %d, %s", tc.verb, code, out)
			}
		})
	}
}

// TestHooksEnableDisableWhichFile: the root file is refused; a group in
// two files needs --file; a plugin's group is found by plugin/group.
func TestHooksEnableDisableWhichFile(t *testing.T) {
	root, ws := hooksEnv(t, `{"gate": {"pre_tool_execution": []}}`, `{"dup": {"Stop": []}, "gate": {"enabled": false, "Stop": []}}`)
	global := filepath.Join(t.TempDir(), "hooks.json")
	writeTestFile(t, global, `{"dup": {"Stop": []}}`)
	plugins := t.TempDir()
	pluginFile := filepath.Join(plugins, "lint", "hooks.json")
	writeTestFile(t, pluginFile, `{"fmt": {"PostToolUse": []}}`)
	where := []string{"--root", root, "--workspace", ws, "--global", global, "--plugins", plugins}
	rootFile := filepath.Join(root, ".agents", "hooks.json")
	rootBefore, _ := os.ReadFile(rootFile)

	_, errOut, code := runHooksCLI(t, "", append([]string{"disable", "gate"}, where...)...)
	if code != 1 || !strings.Contains(errOut, "root file") {
		t.Fatalf("disable a root group: exit %d, %s", code, errOut)
	}
	_, errOut, code = runHooksCLI(t, "", append([]string{"disable", "gate", "--file", rootFile}, where...)...)
	if code != 1 || !strings.Contains(errOut, "is the root file") {
		t.Fatalf("disable in the root file: exit %d, %s", code, errOut)
	}
	if after, _ := os.ReadFile(rootFile); !bytes.Equal(after, rootBefore) {
		t.Fatal("the root file changed")
	}

	_, errOut, code = runHooksCLI(t, "", append([]string{"disable", "dup"}, where...)...)
	if code != 1 || !strings.Contains(errOut, "say which with --file") {
		t.Fatalf("ambiguous group: exit %d, %s", code, errOut)
	}
	_, errOut, code = runHooksCLI(t, "", append([]string{"disable", "dup", "--file", global}, where...)...)
	if got, _ := os.ReadFile(global); code != 0 || string(got) != `{"dup": {"enabled": false, "Stop": []}}` {
		t.Fatalf("disable dup in the global file: exit %d, %s, file %s", code, errOut, got)
	}

	_, errOut, code = runHooksCLI(t, "", append([]string{"disable", "lint/fmt"}, where...)...)
	if got, _ := os.ReadFile(pluginFile); code != 0 || string(got) != `{"fmt": {"enabled": false, "PostToolUse": []}}` {
		t.Fatalf("disable a plugin group: exit %d, %s, file %s", code, errOut, got)
	}

	_, errOut, code = runHooksCLI(t, "", append([]string{"enable", "nope"}, where...)...)
	if code != 1 || !strings.Contains(errOut, `no group "nope"`) {
		t.Fatalf("unknown group: exit %d, %s", code, errOut)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHooksRunCLIEvents: `hooks run` takes the agent-CLI events, prints
// the combined answer in that schema, exits 2 only for a deny.
func TestHooksRunCLIEvents(t *testing.T) {
	root, ws := hooksEnv(t, "", `{
  "gate": {"PreToolUse": [{"matcher": "run_command", "hooks": [
    {"command": "grep -q 'rm -rf' && echo '{\"decision\":\"deny\",\"reason\":\"no rm -rf\"}' || echo '{\"decision\":\"ask\",\"reason\":\"sure?\"}'"}]}]},
  "init": {"SessionStart": [{"command": "echo '{\"injectSteps\": [{\"userMessage\": \"hi\"}]}'"}]}
}`)
	global := filepath.Join(t.TempDir(), "hooks.json")
	writeTestFile(t, global, `{"more": {"Stop": [{"command": "echo '{\"decision\": \"continue\", \"reason\": \"not yet\"}'"}]}}`)
	where := []string{"--root", root, "--workspace", ws, "--global", global}

	out, errOut, code := runHooksCLI(t, `{"toolCall": {"name": "run_command", "args": {"CommandLine": "rm -rf /"}}}`, append([]string{"run", "PreToolUse"}, where...)...)
	if code != 2 || strings.TrimSpace(out) != `{"decision":"deny","reason":"no rm -rf"}` {
		t.Fatalf("deny: exit %d, %q, %s", code, out, errOut)
	}
	out, _, code = runHooksCLI(t, `{"toolCall": {"name": "run_command", "args": {"CommandLine": "ls"}}}`, append([]string{"run", "PreToolUse"}, where...)...)
	if code != 0 || strings.TrimSpace(out) != `{"decision":"ask","reason":"sure?"}` {
		t.Fatalf("ask: exit %d, %q", code, out)
	}
	out, _, code = runHooksCLI(t, `{"conversationId": "c"}`, append([]string{"run", "SessionStart"}, where...)...)
	if code != 0 || strings.TrimSpace(out) != `{"injectSteps":[{"userMessage":"hi"}]}` {
		t.Fatalf("SessionStart: exit %d, %q", code, out)
	}
	out, _, code = runHooksCLI(t, `{"fullyIdle": true}`, append([]string{"run", "Stop"}, where...)...)
	if code != 0 || strings.TrimSpace(out) != `{"decision":"continue","reason":"not yet"}` {
		t.Fatalf("Stop: exit %d, %q", code, out)
	}
	_, errOut, code = runHooksCLI(t, `{}`, append([]string{"run", "pretooluse"}, where...)...)
	if code != 1 || !strings.Contains(errOut, "did you mean PreToolUse?") {
		t.Fatalf("bad event: exit %d, %s", code, errOut)
	}
	_, errOut, code = runHooksCLI(t, `{"tool_call": {"name": "x"}}`, append([]string{"run", "PreToolUse"}, where...)...)
	if code != 1 || !strings.Contains(errOut, `PreToolUse events use "toolCall"`) {
		t.Fatalf("wrong dialect payload: exit %d, %s", code, errOut)
	}
}

// TestHooksList: one row per handler with file, dialect, group, event,
// matcher, handler, enabled and problems.
func TestHooksList(t *testing.T) {
	root, ws := hooksEnv(t, `{"gate": {"pre_tool_execution": [{"matcher": "code_execution", "hooks": [{"command": "gate.py"}]}]}}`,
		`{"lint": {"enabled": false, "PostToolUse": [{"matcher": "*_file", "hooks": [{"command": "lint.sh", "timeout": 5}]}]},
  "init": {"SessionStart": [{"type": "http", "url": "http://x.example/"}]}}`)
	where := []string{"--root", root, "--workspace", ws, "--global", ""}
	out, errOut, code := runHooksCLI(t, "", append([]string{"list", "--json"}, where...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []hookRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 3 {
		t.Fatalf("rows = %+v", rows)
	}
	want := []struct{ dialect, group, event, handler string }{
		{"remote-sandbox", "gate", "pre_tool_execution", "command gate.py"},
		{"agent-cli", "lint", "PostToolUse", "command lint.sh"},
		{"agent-cli", "init", "SessionStart", "http POST http://x.example/"},
	}
	for i, w := range want {
		r := rows[i]
		if r.Dialect != w.dialect || r.Group != w.group || r.Event != w.event || !strings.HasPrefix(r.Handler, w.handler) {
			t.Errorf("row %d = %+v, want %+v", i, r, w)
		}
	}
	if rows[0].Source != "root" || !rows[0].Enabled || rows[1].Enabled || len(rows[0].Problems) != 0 {
		t.Errorf("rows = %+v", rows)
	}
	if len(rows[1].Problems) != 1 || !strings.Contains(rows[1].Problems[0], "invalid RE2 pattern") {
		t.Errorf("lint problems = %q", rows[1].Problems)
	}
	if len(rows[2].Problems) != 1 || !strings.Contains(rows[2].Problems[0], "URL must be https://") {
		t.Errorf("init problems = %q", rows[2].Problems)
	}
	if rows[2].Matcher != "(none: every SessionStart)" {
		t.Errorf("matcher = %q", rows[2].Matcher)
	}

	out, _, code = runHooksCLI(t, "", append([]string{"list"}, where...)...)
	if code != 0 || !strings.HasPrefix(out, "FILE") || !strings.Contains(out, "agent-cli") || strings.Count(out, "\n") != 4 {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
}

// TestHooksGlobalFileFromHome: without --global, the global file is
// $HOME/.gemini/config/hooks.json.
func TestHooksGlobalFileFromHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	writeTestFile(t, filepath.Join(home, ".gemini", "config", "hooks.json"), `{"home-hook": {"Stop": [{"command": "true"}]}}`)
	root, ws := hooksEnv(t, "", "")
	out, errOut, code := runHooksCLI(t, "", "list", "--json", "--root", root, "--workspace", ws)
	var rows []hookRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Group != "home-hook" || rows[0].Source != "global" {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
}
