package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/config"
)

const suggestLog = "testdata/suggest/decisions.log"

// TestAllowlistSuggestGolden: a recorded log (report mode, with other log
// lines, an allowed host, an address-policy denial, localhost, a bad host
// and a line that is not JSON) gives the golden allowlist: exact names,
// a wildcard for 3+ siblings (absorbing a deeper name), none under a public
// suffix (github.io), counts as comments; and it loads as a config.
func TestAllowlistSuggestGolden(t *testing.T) {
	stdout, stderr, code := runCLI(t, "allowlist", "suggest", "--from", suggestLog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want, err := os.ReadFile("testdata/suggest/allowlist.golden")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(want) {
		t.Fatalf("got:\n%s\nwant (testdata/suggest/allowlist.golden):\n%s", stdout, want)
	}
	if !strings.Contains(stderr, "skipped 3 lines") {
		t.Errorf("stderr = %q, want the 3 skipped lines counted", stderr)
	}
	cfg, err := config.Parse("suggested.yaml", []byte(stdout), config.Options{})
	if err != nil {
		t.Fatalf("the suggestion does not load: %v", err)
	}
	for _, host := range []string{"api.openai.com", "z.cdn.example.net", "files.pythonhosted.org", "pypi.org"} {
		if !cfg.Allowlist.Decide(host).Allowed {
			t.Errorf("the suggestion does not allow %s", host)
		}
	}
	for _, host := range []string{"github.io", "other.github.io", "api.anthropic.com", "metadata.internal.example"} {
		if cfg.Allowlist.Decide(host).Allowed {
			t.Errorf("the suggestion allows %s", host)
		}
	}
}

// TestAllowlistSuggestFromDecisionsAPI: the answer of GET /v1/decisions (a
// JSON array, newest first, with DNS entries) on stdin gives the same
// entries.
func TestAllowlistSuggestFromDecisionsAPI(t *testing.T) {
	f, err := os.Open(suggestLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list := []map[string]any{{"kind": "dns", "name": "dns-only.example.org", "verdict": "allow"}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == "decision" {
			delete(m, "message")
			m["kind"] = "proxy"
			list = append([]map[string]any{m}, list...)
		}
	}
	body, _ := json.Marshal(list)
	run := func(args ...string) string {
		t.Helper()
		var out, errb strings.Builder
		if err := run(t.Context(), args, strings.NewReader(string(body)), &out, &errb); err != nil {
			t.Fatalf("%v: %s", err, errb.String())
		}
		return out.String()
	}
	got := run("allowlist", "suggest", "--from", "-")
	want, _ := os.ReadFile("testdata/suggest/allowlist.golden")
	if entries(got) != entries(string(want)) {
		t.Fatalf("from the API answer:\n%s\nwant the entries of:\n%s", got, want)
	}
}

// entries drops the header comment of a suggestion.
func entries(s string) string {
	_, rest, _ := strings.Cut(s, "\n")
	return rest
}

func TestAllowlistSuggestUsage(t *testing.T) {
	for _, args := range [][]string{{"allowlist"}, {"allowlist", "suggest"}, {"allowlist", "suggest", "--from", "-", "--min-siblings", "1"}} {
		if _, _, code := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestAllowlistSuggestHostileInput: a line longer than a decision line can
// be is a clear error, not a crash; binary garbage is skipped.
func TestAllowlistSuggestHostileInput(t *testing.T) {
	var out, errb strings.Builder
	long := strings.Repeat("x", maxDecisionLine+10)
	err := run(t.Context(), []string{"allowlist", "suggest", "--from", "-"}, strings.NewReader(long), &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "lines are at most") {
		t.Fatalf("a too long line: %v", err)
	}
	out.Reset()
	garbage := "\x00\xff{\"message\":\"decision\",\"verdict\":\"would-deny\",\"host\":\"\xff\xfe\"}\n[not json\n"
	if err := run(t.Context(), []string{"allowlist", "suggest", "--from", "-"}, strings.NewReader(garbage), &out, &errb); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "network:") {
		t.Fatalf("garbage produced entries:\n%s", out.String())
	}
}
