package hooks

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadProblems: one hooks.json per failure mode; each must report the
// position, field and message (and hint) shown.
func TestLoadProblems(t *testing.T) {
	cases := []struct {
		name    string
		content string
		want    []string // substrings of the problems, in order, after the file name
	}{
		{"syntax error", "{\n  \"g\": {\n    \"enabled\": tru\n  }\n}", []string{":3:19: error: invalid JSON: invalid character '\\n' in literal true (expecting 'e')"}},
		{"truncated", `{"g": {`, []string{"error: invalid JSON: unexpected end of file; the whole file is ignored"}},
		{"top level array", `[]`, []string{":1:1: error: the top level must be an object of named groups, not array"}},
		{"group not object", `{"g": 1}`, []string{":1:7: error: g: a group must be an object, not number"}},
		{"event name case", `{"g": {"pretooluse": []}}`, []string{`:1:8: error: g.pretooluse: unknown field (hint: event names are case-sensitive: write "PreToolUse")`, `warning: g: group has no hooks for any event`}},
		{"both dialects", "{\"a\": {\"PreToolUse\": []},\n \"b\": {\"pre_tool_execution\": []}}",
			[]string{`:2:8: error: b.pre_tool_execution: an event of the remote-sandbox dialect in a file of the agent-cli dialect (its first event, line 1, decides); ignored (hint: one file holds one dialect: move these hooks to a file of their own, or use this file's event names)`, `:2:2: warning: b: group has no hooks`}},
		{"matcher on a handler list", `{"g": {"Stop": [{"matcher": "x", "command": "true"}]}}`, []string{`:1:18: warning: g.Stop[0].matcher: ignored: this event has no tool to match`}},
		{"rules on a handler list", `{"g": {"SessionStart": [{"matcher": "", "hooks": []}]}}`,
			[]string{`warning: g.SessionStart[0].matcher: ignored`, `error: g.SessionStart[0].hooks: unknown field (hint: this event holds a list of handlers directly, not {"matcher", "hooks"} rules)`, `error: g.SessionStart[0]: command handler without "command"`}},
		{"typo field", `{"g": {"pre_tool_executon": []}}`, []string{`g.pre_tool_executon: unknown field (hint: did you mean "pre_tool_execution"?)`}},
		{"enabled string", `{"g": {"enabled": "false", "pre_tool_execution": []}}`, []string{`:1:19: error: g.enabled: must be true or false, not string; the group stays enabled`}},
		{"rules not list", `{"g": {"pre_tool_execution": {}}}`, []string{`g.pre_tool_execution: must be a list`}},
		{"glob matcher", `{"g": {"pre_tool_execution": [{"matcher": "read_*", "hooks": [{"command": "true"}]}]}}`,
			[]string{`warning: g.pre_tool_execution[0].matcher: pattern "read_*" is RE2, not a glob (hint: in RE2 '*' repeats the character before it; if "read_*" is meant as a glob, write "read_.*")`}},
		{"unknown handler field", "{\"g\": {\"pre_tool_execution\": [{\"matcher\": \"*\",\n \"hooks\": [{\"command\": \"true\", \"timout\": 5}]}]}}",
			[]string{`:2:32: error: g.pre_tool_execution[0].hooks[0].timout: unknown field (hint: did you mean "timeout"?)`}},
		{"url on command", `{"g": {"pre_tool_execution": [{"hooks": [{"url": "https://x"}]}]}}`,
			[]string{`hooks[0].url: unknown field (hint: "url" and "headers" belong to "type": "http" handlers)`, `hooks[0]: command handler without "command"`, `warning: g.pre_tool_execution[0]: no "matcher"`}},
		{"bad type", `{"g": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"type": "htp", "url": "https://x"}]}]}}`,
			[]string{`hooks[0].type: unknown handler type "htp" (hint: did you mean "http"?)`}},
		{"http url", `{"g": {"post_tool_execution": [{"matcher": "*", "hooks": [{"type": "http", "url": "http://x.example/"}]}]}}`,
			[]string{`hooks[0].url: URL must be https://, not "http://" (hint: use https://`}},
		{"url with credentials", `{"g": {"post_tool_execution": [{"matcher": "*", "hooks": [{"type": "http", "url": "https://u:p@x.example/"}]}]}}`,
			[]string{`URL must not carry credentials`}},
		{"credential header", `{"g": {"post_tool_execution": [{"matcher": "*", "hooks": [{"type": "http", "url": "https://x.example/", "headers": {"Authorization": "Bearer abc"}}]}]}}`,
			[]string{`warning: g.post_tool_execution[0].hooks[0].headers.Authorization: header name "Authorization" looks like a credential; hooks.json headers are for non-secret values (hint: put credentials in the gateway's network.allowlist[].transform`}},
		{"reserved header", `{"g": {"post_tool_execution": [{"matcher": "*", "hooks": [{"type": "http", "url": "https://x.example/", "headers": {"Host": "y"}}]}]}}`,
			[]string{`headers.Host: header is set by the hook runtime`}},
		{"timeout string", `{"g": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "true", "timeout": "10"}]}]}}`,
			[]string{`hooks[0].timeout: must be a number of seconds, not string; using the default 30s`}},
		{"timeout negative", `{"g": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "true", "timeout": -1}]}]}}`,
			[]string{`hooks[0].timeout: must be a positive number`}},
		{"on_failure typo", `{"g": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"command": "true", "on_failure": "block"}]}]}}`,
			[]string{`hooks[0].on_failure: must be "allow" or "deny"; treated as "deny"`}},
		{"duplicate group", `{"g": {"pre_tool_execution": []}, "g": {}}`, []string{`:1:35: error: g: duplicate group name`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.writeWS(t, tc.content)
			_, ps := e.load(t)
			file := filepath.Join(e.ws, HooksFile)
			var got []string
			for _, p := range ps {
				if p.File != file {
					t.Errorf("problem file = %q", p.File)
				}
				got = append(got, strings.TrimPrefix(p.Error(), file))
			}
			i := 0
			for _, g := range got {
				if i < len(tc.want) && strings.Contains(g, tc.want[i]) {
					i++
				}
			}
			if i != len(tc.want) {
				t.Errorf("problems:\n  %s\nwant (in order):\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestLoadValues(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, `{"g": {"enabled": false, "pre_tool_execution": [{"matcher": "a|b", "hooks": [
		{"command": "x"},
		{"type": "http", "url": "https://h.example/p", "headers": {"X-A": "1"}, "timeout": 0.5, "on_failure": "deny"}]}]}}`)
	h, ps := e.load(t)
	if len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	g := h.Groups[0]
	hs := g.Rules[PreToolExecution][0].Handlers
	if g.Enabled || len(hs) != 2 || hs[0].Type != CommandHandler || hs[0].Timeout != DefaultTimeout || hs[0].FailDeny ||
		hs[1].Type != HTTPHandler || hs[1].Timeout != 500*time.Millisecond || !hs[1].FailDeny || hs[1].Headers["X-A"] != "1" || hs[1].Line != 3 {
		t.Fatalf("handlers = %+v %+v", hs[0], hs[1])
	}
	// No files: no hooks, no problems.
	h, ps, err := Load(LoadOptions{Workspace: t.TempDir(), Root: t.TempDir()})
	if err != nil || len(ps) != 0 || len(h.Files) != 0 || len(h.Groups) != 0 {
		t.Fatalf("empty load: %+v %v %v", h, ps, err)
	}
}

// FuzzLoad: arbitrary bytes never panic the loader, and every problem has a
// position inside the file.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"g": {"pre_tool_execution": [{"matcher": "*_file", "hooks": [{"command": "true"}]}]}}`))
	f.Add([]byte(`{"g": {"enabled": 1, "x": [}`))
	f.Add([]byte(`[{"a":"\u0000"}]`))
	f.Add([]byte(`{"g": {"Stop": [{"matcher": "x", "hooks": []}], "pre_tool_execution": []}}`))
	f.Add([]byte(`{"g": {"PreToolUse": [{"matcher": "", "hooks": [{"type": "http", "url": "https://x"}]}], "SessionStart": {}}}`))
	f.Add([]byte(`{"g": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "policy", "file": "/dev/null"}, {"type": "policy", "file": 1}]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, ps := compileFile("f.json", data)
		lines := strings.Count(string(data), "\n") + 1
		for _, p := range ps {
			if p.File != "f.json" {
				continue // a policy file a handler names: its own lines
			}
			if p.Line < 1 || p.Line > lines {
				t.Fatalf("problem line %d outside 1..%d: %s", p.Line, lines, p)
			}
		}
	})
}
