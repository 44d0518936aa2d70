package policy

import (
	"strings"
	"testing"
)

func TestWithin(t *testing.T) {
	roots := []string{"/workspace", "/srv/data/"}
	for p, want := range map[string]bool{
		"/workspace":                  true,
		"/workspace/":                 true,
		"/workspace/a/b":              true,
		"/srv/data/x":                 true,
		"/workspace-evil":             false,
		"/workspace-evil/a":           false,
		"/workspaces/a":               false,
		"/workspace/../etc":           false,
		"/workspace/a/../../etc":      false,
		"/workspace/a/../b":           true,
		"/workspace/./../workspace/c": true,
		"//workspace///a":             true,
		"/srv/database":               false,
		"workspace/a":                 false,
		"./workspace":                 false,
		"":                            false,
		"/workspace/a\x00":            false,
		"/":                           false,
	} {
		if got := Within(p, roots); got != want {
			t.Errorf("Within(%q) = %v, want %v", p, got, want)
		}
	}
	if Within("/etc", []string{"relative", ""}) {
		t.Error("a relative root contains nothing")
	}
	if !Within("/etc", []string{"/"}) {
		t.Error("/ contains every absolute path")
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "cmd/main.go", false},
		{"/workspace/**/*.go", "/workspace/main.go", true},
		{"/workspace/**/*.go", "/workspace/a/b/c.go", true},
		{"/workspace/**/*.go", "/workspace/a/b/c.py", false},
		{"/workspace/**", "/workspace", true},
		{"/workspace/**", "/workspace-evil/a", false},
		{"**/.env", "/a/b/.env", true},
		{"**/.env", ".env", true},
		{"secret?.txt", "secret1.txt", true},
		{"[a-c]*", "beta", true},
		{"[a-c]*", "delta", false},
	} {
		got, err := Glob(c.pattern, c.name)
		if err != nil || got != c.want {
			t.Errorf("Glob(%q, %q) = %v, %v; want %v", c.pattern, c.name, got, err, c.want)
		}
	}
	if _, err := Glob("[a-", "a"); err == nil {
		t.Error("a bad pattern must be an error")
	}
	if _, err := Glob(strings.Repeat("**/", 300), strings.Repeat("a/", 300)); err == nil {
		t.Error("an oversized match must be refused")
	}
}

// The helpers as a policy uses them, through CEL.
func TestCELFunctions(t *testing.T) {
	p := mustParse(t, `rules:
  - allow: view_file
    when: path.within(args.AbsolutePath, ["/workspace"])
  - allow: write_to_file
    when: path.within(args.TargetFile, "/workspace") && !args.TargetFile.glob("**/.git/**")
  - allow: clean
    when: path.clean(args.p) == "/etc"
  - allow: bad_glob
    when: args.p.glob(args.pattern)
  - deny: "*"
`)
	cases := []struct {
		tool string
		args map[string]any
		want Action
	}{
		{"view_file", map[string]any{"AbsolutePath": "/workspace/a"}, Allow},
		{"view_file", map[string]any{"AbsolutePath": "/workspace/../etc/passwd"}, Deny},
		{"view_file", map[string]any{"AbsolutePath": "/workspace-evil/a"}, Deny},
		{"write_to_file", map[string]any{"TargetFile": "/workspace/src/a.go"}, Allow},
		{"write_to_file", map[string]any{"TargetFile": "/workspace/.git/config"}, Deny},
		{"clean", map[string]any{"p": "/a/../etc/"}, Allow},
		{"bad_glob", map[string]any{"p": "x", "pattern": "["}, Deny},
	}
	for _, c := range cases {
		d := decide(p, c.tool, c.args)
		if d.Action != c.want {
			t.Errorf("%s %v: got %s %q", c.tool, c.args, d.Action, d.Reason)
		}
	}
	if d := decide(p, "bad_glob", map[string]any{"p": "x", "pattern": "["}); d.Err == nil || !strings.Contains(d.Reason, "glob") {
		t.Errorf("a bad glob is a fail-closed error: %+v", d)
	}
}

// The event variable reaches the whole event.
func TestEventVariable(t *testing.T) {
	p := mustParse(t, `rules:
  - deny: "*"
    when: event.environment_id == "env_prod"
`)
	in := Input{Tool: "read_file", Event: map[string]any{"environment_id": "env_prod"}}
	if d := p.Decide(t.Context(), in); d.Action != Deny {
		t.Fatalf("%+v", d)
	}
	in.Event["environment_id"] = "env_dev"
	if d := p.Decide(t.Context(), in); d.Action != Allow {
		t.Fatalf("%+v", d)
	}
}
