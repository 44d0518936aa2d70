package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/srcpos"
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("policy.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

func decide(p *Policy, tool string, args map[string]any) Decision {
	return p.Decide(context.Background(), Input{Tool: tool, Args: args})
}

// want checks a decision's action and, when line > 0, the rule's line.
func want(t *testing.T, d Decision, action Action, line int) {
	t.Helper()
	if d.Action != action || (line > 0 && d.Rule.Line != line) || (line == 0 && d.Rule.Level != LevelDefault) {
		t.Fatalf("got %s by %s (%s) %q, want %s by line %d", d.Action, d.Rule.Pos(), d.Rule.Level, d.Reason, action, line)
	}
}

// The reference's enforcement example: deny everything, allow two reads,
// ask before commands.
func TestReferenceEnforceExample(t *testing.T) {
	p := mustParse(t, `rules:
  - deny: "*"
  - allow: view_file
  - allow: list_directory
  - ask: run_command
`)
	want(t, decide(p, "view_file", nil), Allow, 3)
	want(t, decide(p, "list_directory", nil), Allow, 4)
	want(t, decide(p, "run_command", map[string]any{"CommandLine": "ls"}), Ask, 5)
	d := decide(p, "write_to_file", nil)
	want(t, d, Deny, 2)
	if d.Rule.Level != LevelAnyDeny || !strings.Contains(d.Reason, "policy.yaml:2") {
		t.Fatalf("deny names %s %q", d.Rule.Level, d.Reason)
	}
}

// confirm_run_command: commands denied (level 0), the rest allowed (8).
func TestPresetConfirmRunCommand(t *testing.T) {
	p := mustParse(t, "presets: [confirm_run_command]\n")
	for _, tool := range []string{"run_command", "code_execution"} {
		d := decide(p, tool, nil)
		want(t, d, Deny, 1)
		if d.Rule.Level != LevelToolDeny || d.Rule.Source != "presets[0] confirm_run_command" {
			t.Fatalf("%s: %+v", tool, d.Rule)
		}
	}
	d := decide(p, "view_file", nil)
	want(t, d, Allow, 1)
	if d.Rule.Level != LevelAnyAllow {
		t.Fatalf("view_file: %+v", d.Rule)
	}
}

// The reference's rm predicate, as CEL.
func TestRmPredicate(t *testing.T) {
	p := mustParse(t, `rules:
  - deny: run_command
    when: 'args.CommandLine.matches("rm\\s+-rf")'
    reason: destructive command
  - allow: run_command
`)
	d := decide(p, "run_command", map[string]any{"CommandLine": "rm  -rf /"})
	want(t, d, Deny, 2)
	if d.Reason != "destructive command" {
		t.Fatalf("reason %q", d.Reason)
	}
	want(t, decide(p, "run_command", map[string]any{"CommandLine": "ls -l"}), Allow, 5)
}

// One table of the nine levels against each other.
func TestNineLevels(t *testing.T) {
	p := mustParse(t, `rules:
  - allow: "*"                                   # 2: level 8
  - ask: "*"                                     # 3: level 7
  - deny: "*"                                    # 4: level 6
    when: tool == "any_deny"
  - allow: { prefix: "mcp__gh__" }               # 6: level 5
  - ask: { prefix: "mcp__gh__" }                 # 7: level 4
    when: tool != "mcp__gh__read"
  - deny: { prefix: "mcp__gh__" }                # 9: level 3
    when: tool == "mcp__gh__delete" || tool == "mcp__gh__get_issue"
  - allow: mcp__gh__get_issue                    # 11: level 2, beats the prefix deny
  - allow: [view_file, edit]                     # 12: level 2
  - ask: edit                                    # 13: level 1, beats the allow of line 12
  - deny: edit                                   # 14: level 0
    when: args.x == 1
  - allow: { prefix: "mcp__x__", tools: [ping] } # 16: level 2 for mcp__x__ping
  - deny: { prefix: "mcp__x__" }                 # 17: level 3
`)
	cases := []struct {
		tool  string
		args  map[string]any
		want  Action
		line  int
		level Level
	}{
		{"unknown", nil, Ask, 3, LevelAnyAsk},                     // * ask beats * allow
		{"any_deny", nil, Deny, 4, LevelAnyDeny},                  // * deny beats * ask
		{"mcp__gh__read", nil, Allow, 6, LevelPrefixAllow},        // prefix allow beats * ask
		{"mcp__gh__list", nil, Ask, 7, LevelPrefixAsk},            // prefix ask beats prefix allow
		{"mcp__gh__delete", nil, Deny, 9, LevelPrefixDeny},        // prefix deny beats * allow
		{"mcp__gh__get_issue", nil, Allow, 11, LevelToolAllow},    // tool allow beats prefix deny
		{"view_file", nil, Allow, 12, LevelToolAllow},             // tool allow beats * ask
		{"edit", map[string]any{"x": 2}, Ask, 13, LevelToolAsk},   // ask beats allow, same specificity
		{"edit", map[string]any{"x": 1}, Deny, 14, LevelToolDeny}, // tool deny beats all
		{"mcp__x__ping", nil, Allow, 16, LevelToolAllow},          // {prefix, tools} is tool level
		{"mcp__x__pong", nil, Deny, 17, LevelPrefixDeny},
	}
	for _, c := range cases {
		d := decide(p, c.tool, c.args)
		if d.Action != c.want || d.Rule.Line != c.line || d.Rule.Level != c.level {
			t.Errorf("%s %v: got %s by line %d (%s), want %s by line %d (%s)", c.tool, c.args, d.Action, d.Rule.Line, d.Rule.Level, c.want, c.line, c.level)
		}
	}
}

func TestLongToolNameIsCutInReasons(t *testing.T) {
	p := mustParse(t, "presets: [deny_all]\ndefault: deny\nrules:\n  - deny: x\n")
	long := strings.Repeat("a", 10000)
	if d := decide(p, long, nil); d.Action != Deny || len(d.Reason) > 300 {
		t.Fatalf("%s, reason of %d bytes", d.Action, len(d.Reason))
	}
	p = mustParse(t, "default: deny\nrules:\n  - allow: x\n")
	if d := decide(p, long, nil); d.Action != Deny || len(d.Reason) > 300 {
		t.Fatalf("%s, reason of %d bytes", d.Action, len(d.Reason))
	}
}

func TestFileOrderWithinLevel(t *testing.T) {
	p := mustParse(t, `rules:
  - deny: t
    when: args.n > 5
    reason: first
  - deny: t
    reason: second
`)
	if d := decide(p, "t", map[string]any{"n": 9}); d.Reason != "first" {
		t.Fatalf("got %q", d.Reason)
	}
	if d := decide(p, "t", map[string]any{"n": 1}); d.Reason != "second" {
		t.Fatalf("a false predicate must skip its rule; got %q", d.Reason)
	}
}

func TestDefaults(t *testing.T) {
	p := mustParse(t, "rules:\n  - deny: run_command\n")
	want(t, decide(p, "view_file", nil), Allow, 0)
	p = mustParse(t, "default: deny\nrules:\n  - allow: view_file\n")
	d := decide(p, "run_command", nil)
	want(t, d, Deny, 0)
	if !strings.Contains(d.Reason, "default deny") {
		t.Fatalf("reason %q", d.Reason)
	}
	want(t, decide(p, "view_file", nil), Allow, 3)
}

// Anything that fails while evaluating denies, with the error as reason,
// even under an allow rule.
func TestEvaluationErrorDenies(t *testing.T) {
	p := mustParse(t, `rules:
  - allow: run_command
    when: args.CommandLine.startsWith("ls")
  - allow: "*"
  - allow: num
    when: int(args.n) / int(args.d) > 1
  - allow: dynbool
    when: args.flag
`)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"run_command", nil}, // missing field
		{"run_command", map[string]any{"CommandLine": 5.0}}, // wrong type
		{"num", map[string]any{"n": 1.0, "d": 0.0}},         // division by zero
		{"dynbool", map[string]any{"flag": "yes"}},          // not a boolean
	} {
		d := decide(p, c.tool, c.args)
		if d.Action != Deny || d.Err == nil || !strings.Contains(d.Reason, "policy error") {
			t.Errorf("%s %v: got %s %q (err %v), want a fail-closed deny", c.tool, c.args, d.Action, d.Reason, d.Err)
		}
	}
	want(t, decide(p, "run_command", map[string]any{"CommandLine": "ls -l"}), Allow, 2)
}

// A hostile predicate stops at the cost limit and denies.
func TestCostLimitDenies(t *testing.T) {
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	expr := ten + ".all(a, " + ten + ".all(b, " + ten + ".all(c, " + ten + ".all(d, " + ten + ".all(e, " + ten + ".all(f, " + ten + `.all(g, tool != "")))))))`
	p := mustParse(t, "rules:\n  - allow: t\n    when: '"+expr+"'\n")
	d := decide(p, "t", nil)
	if d.Action != Deny || d.Err == nil || !strings.Contains(d.Reason, "cost") {
		t.Fatalf("got %s %q", d.Action, d.Reason)
	}
}

func TestWorkspaceOnly(t *testing.T) {
	p := mustParse(t, `presets:
  - workspace_only: {paths: [/workspace, /etc/app/]}
  - allow_all
`)
	cases := []struct {
		tool, field, path string
		want              Action
	}{
		{"read_file", "path", "/workspace/a.txt", Allow},
		{"read_file", "path", "/workspace", Allow},
		{"read_file", "path", "/workspace/../etc/shadow", Deny},
		{"read_file", "path", "/workspace/./sub/../../etc/passwd", Deny},
		{"read_file", "path", "/workspace/link/../../../root", Deny},
		{"read_file", "path", "/workspace-evil/x", Deny},
		{"read_file", "path", "/workspaces", Deny},
		{"read_file", "path", "workspace/a.txt", Deny},
		{"read_file", "path", "../workspace/a", Deny},
		{"read_file", "path", "", Deny},
		{"read_file", "path", "/workspace/a\x00/../../etc", Deny},
		{"write_file", "path", "//workspace//b", Allow},
		{"view_file", "AbsolutePath", "/etc/app/config.yaml", Allow},
		{"view_file", "AbsolutePath", "/etc/app-other/x", Deny},
		{"write_to_file", "TargetFile", "/workspace/src/main.go", Allow},
		{"replace_file_content", "TargetFile", "/tmp/x", Deny},
		{"list_dir", "DirectoryPath", "/", Deny},
		{"grep_search", "SearchPath", "/workspace", Allow},
		{"view_file", "path", "/workspace/a", Deny}, // the CLI tool's path is AbsolutePath
	}
	for _, c := range cases {
		d := decide(p, c.tool, map[string]any{c.field: c.path})
		if d.Action != c.want {
			t.Errorf("%s %s=%q: got %s (%s)", c.tool, c.field, c.path, d.Action, d.Reason)
		}
	}
	if d := decide(p, "read_file", map[string]any{"path": 7.0}); d.Action != Deny {
		t.Errorf("a non-string path: %s", d.Action)
	}
	if d := decide(p, "run_command", map[string]any{"CommandLine": "cat /etc/shadow"}); d.Action != Allow {
		t.Errorf("workspace_only does not cover commands: %s", d.Action)
	}
}

func TestSafeDefaults(t *testing.T) {
	p := mustParse(t, "presets: [safe_defaults]\n")
	for tool, a := range map[string]Action{
		"read_file": Allow, "view_file": Allow, "list_dir": Allow, "grep_search": Allow,
		"write_file": Ask, "delete_file": Ask, "code_execution": Ask, "run_command": Ask,
		"write_to_file": Ask, "replace_file_content": Ask, "mcp__gh__delete_repo": Ask,
	} {
		if d := decide(p, tool, nil); d.Action != a {
			t.Errorf("%s: got %s, want %s", tool, d.Action, a)
		}
	}
}

func TestDenyAllAllowAll(t *testing.T) {
	want(t, decide(mustParse(t, "presets: [deny_all]\n"), "view_file", nil), Deny, 1)
	want(t, decide(mustParse(t, "presets: [allow_all]\n"), "run_command", nil), Allow, 1)
	// A user's rule beats a preset's at a more specific level.
	p := mustParse(t, "rules:\n  - allow: view_file\npresets: [deny_all]\n")
	want(t, decide(p, "view_file", nil), Allow, 2)
}

func TestExplainListsPredicates(t *testing.T) {
	p := mustParse(t, `rules:
  - deny: run_command
    when: args.CommandLine.contains("rm")
  - ask: run_command
`)
	d, steps := p.Explain(context.Background(), Input{Tool: "run_command", Args: map[string]any{"CommandLine": "ls"}})
	if d.Action != Ask || len(steps) != 1 || steps[0].Result != "false" || steps[0].Rule.Line != 2 {
		t.Fatalf("%+v %+v", d, steps)
	}
}

func TestJSONPolicy(t *testing.T) {
	p, err := Parse("policy.json", []byte(`{"default": "deny", "rules": [{"allow": ["view_file"]}, {"ask": {"prefix": "mcp__"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want(t, decide(p, "view_file", nil), Allow, 1)
	if d := decide(p, "mcp__a__b", nil); d.Action != Ask || d.Rule.Level != LevelPrefixAsk {
		t.Fatalf("%+v", d)
	}
	_, err = Parse("policy.json", []byte("{\n  \"rules\": [\n    {\"allow\": \"x\",}\n  ]\n}"))
	if err == nil || !strings.HasPrefix(err.Error(), "policy.json:3: JSON syntax error") {
		t.Fatalf("got %v", err)
	}
}

// Every problem of a file, each at its line and field, with a fix.
func TestLoadErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"", "policy.yaml: the file is empty"},
		{"rulez: []\n", "policy.yaml:1: rulez: unknown field (hint: known fields here: default, rules, presets, approver, approver_timeout)"},
		{"default: maybe\nrules: []\n", `policy.yaml:1: default: must be allow or deny, not "maybe"`},
		{"rules:\n  - deny: run_command\n    allow: view_file\n", "policy.yaml:2: rules[0]: a rule takes one decision, not deny and allow"},
		{"rules:\n  - when: 'true'\n", "policy.yaml:2: rules[0]: a rule needs a decision"},
		{"rules:\n  - deny: mcp__gh__*\n", `policy.yaml:2: rules[0].deny: "mcp__gh__*" is not a tool name: patterns are not matched (hint: for every tool of one server write {prefix: "mcp__server__"}`},
		{"rules:\n  - deny: read_file|write_file\n", "rules[0].deny: \"read_file|write_file\" is not a tool name"},
		{"rules:\n  - deny: 5\n", `policy.yaml:2: rules[0].deny: must be a string, but 5 is read as the number 5 (hint: quote it: "5")`},
		{"rules:\n  - deny: [a, a]\n", `rules[0].deny[1]: "a" is listed twice`},
		{"rules:\n  - deny: [a, \"*\"]\n", `rules[0].deny[1]: "*" cannot be one name of a list`},
		{"rules:\n  - deny: {tools: [a]}\n", "policy.yaml:2: rules[0].deny: a mapping here needs prefix:"},
		{"rules:\n  - deny: {prefix: mcp, tool: [a]}\n", "policy.yaml:2: rules[0].deny.tool: unknown field (hint: known fields here: prefix, tools)"},
		{"rules:\n  - deny: x\n    deny: y\n", "policy.yaml:3: rules[0].deny: set twice (first on line 2)"},
		{"rules:\n  - deny: x\n    when: args.a ==\n", "policy.yaml:3: rules[0].when: CEL: Syntax error"},
		{"rules:\n  - deny: x\n    when: |\n      args.a == 1 &&\n      nosuch(args.b)\n", "policy.yaml:5: rules[0].when: CEL: undeclared reference to 'nosuch'"},
		{"rules:\n  - deny: x\n    when: args.a + 1\n", "policy.yaml:3: rules[0].when: must give true or false, but gives int"},
		{"rules:\n  - deny: x\n    when: tool + \"a\"\n", "rules[0].when: must give true or false, but gives string"},
		{"rules:\n  - deny: x\n    reason: on\n", "rules[0].reason: on is a boolean to some YAML readers"},
		{"presets: [nope]\n", `policy.yaml:1: presets[0]: unknown preset "nope" (hint: known presets: confirm_run_command, safe_defaults, workspace_only, deny_all, allow_all)`},
		{"rules:\n  - deny: x\n    when: args.p.glob(\"[a-\")\n", `policy.yaml:3: rules[0].when: glob: bad pattern "[a-": syntax error in pattern`},
		{"rules:\n  - deny: x\n    when: path.within(args.p, [\"/ok\", \"workspace\"])\n", `policy.yaml:3: rules[0].when: path.within: the root "workspace" is not an absolute path`},
		{"rules:\n  - deny: x\n    when: path.within(args.p, \"rel\")\n", `path.within: the root "rel" is not an absolute path`},
		{"rules:\n  - deny: x\n    when: args.p.matches(\"(\")\n", `policy.yaml:3: rules[0].when: CEL: `},
		{"presets: [safe_default]\n", `presets[0]: unknown preset "safe_default" (hint: did you mean safe_defaults? known presets:`},
		{"presets: [workspace_only]\n", "presets[0]: workspace_only needs the paths it allows"},
		{"presets:\n  - workspace_only: {paths: [relative]}\n", `presets[0].workspace_only.paths[0]: "relative" is not an absolute directory below /`},
		{"presets:\n  - deny_all: {x: 1}\n", "presets[0].deny_all: takes no options"},
		{"rules: []\napprover: http://a.example/x\n", "policy.yaml:2: approver: must be an https URL without credentials"},
		{"rules: []\napprover_timeout: 10\n", `policy.yaml:2: approver_timeout: "10" has no unit (hint: did you mean "10s"?)`},
		{"rules: []\napprover_timeout: 1h\n", "approver_timeout: must be a duration above 0 and at most 5m0s"},
		{"default: allow\n", "no rules and no presets"},
		{"rules:\n\t- deny: x\n", "policy.yaml:2: a tab character in the indentation"},
		{"rules: []\n---\nrules: []\n", "policy.yaml:2: more than one YAML document"},
		{"rules: deny\n", `policy.yaml:1: rules: must be a list, not the string "deny"`},
		{"rules:\n  - deny\n", "policy.yaml:2: rules[0]: a rule must be a mapping"},
		{"rules:\n  - deny:\n", "policy.yaml:2: rules[0].deny: is empty (hint: name a tool"},
		{"rules:\n  - deny: {prefix: p, tools: []}\n", "rules[0].deny.tools: must be a non-empty list of tool names, not an empty list"},
	}
	for _, c := range cases {
		_, err := Parse("policy.yaml", []byte(c.src))
		var errs srcpos.Errors
		if !errors.As(err, &errs) {
			t.Errorf("%q: got %v, want srcpos.Errors", c.src, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.src, err, c.want)
		}
	}
}

// Every problem is reported, not only the first.
func TestLoadReportsAll(t *testing.T) {
	_, err := Parse("p.yaml", []byte("rules:\n  - deny: 'a b'\n  - ask: x\n    when: nosuch\npresets: [nope]\nextra: 1\n"))
	var errs srcpos.Errors
	if !errors.As(err, &errs) || len(errs) != 4 {
		t.Fatalf("got %d problems: %v", len(errs), err)
	}
}

func TestLoadFile(t *testing.T) {
	if _, err := Load(t.TempDir() + "/missing.yaml"); err == nil || !strings.Contains(err.Error(), "missing.yaml: cannot read: no such file or directory") {
		t.Fatalf("got %v", err)
	}
}
