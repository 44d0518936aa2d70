package service

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/hookhttp"
)

const token = "hg-policy-canary-5d1e"

const basePolicy = `rules:
  - deny: code_execution
    when: 'args.code.matches("rm\\s+-rf")'
    reason: destructive command
  - ask: [code_execution, run_command]
  - allow: [read_file, view_file]
  - deny: "*"
`

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	svc  *Service
	url  string
	file string
	logs *syncBuffer
}

func start(t testing.TB, policyText string, approver *hookhttp.Client) *fixture {
	t.Helper()
	f := &fixture{file: filepath.Join(t.TempDir(), "policy.yaml"), logs: &syncBuffer{}}
	if err := os.WriteFile(f.file, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Options{File: f.file, Token: token, Approver: approver, Logger: zerolog.New(f.logs)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	f.svc, f.url = svc, srv.URL
	return f
}

func (f *fixture) post(t testing.TB, path, auth, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func remoteEvent(tool, args string) string {
	return fmt.Sprintf(`{"tool_call": {"name": %q, "args": %s}, "environment_id": "env_1"}`, tool, args)
}

func cliEvent(tool, args string) string {
	return fmt.Sprintf(`{"toolCall": {"name": %q, "args": %s}, "stepIdx": 3, "conversationId": "c1", "workspacePaths": ["/w"]}`, tool, args)
}

func TestTokenRequired(t *testing.T) {
	f := start(t, basePolicy, nil)
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, "Bearer " + token + "x", token} {
		for _, path := range []string{"/v1/hooks/pre_tool_execution", "/v1/hooks/PreToolUse", "/nope"} {
			code, body := f.post(t, path, auth, remoteEvent("read_file", `{}`))
			if code != http.StatusUnauthorized || strings.Contains(body, token) {
				t.Errorf("auth #%d on %s: %d", len(auth), path, code)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, f.url+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d", resp.StatusCode)
	}
	if code, _ := f.post(t, "/v1/hooks/pre_tool_execution", "bearer "+token, remoteEvent("read_file", `{}`)); code != 200 {
		t.Errorf("the right token (scheme in lower case): %d", code)
	}
}

func TestBothDialects(t *testing.T) {
	f := start(t, basePolicy, nil)
	auth := "Bearer " + token
	cases := []struct{ path, body, want string }{
		{"/v1/hooks/pre_tool_execution", remoteEvent("read_file", `{"path": "/workspace/a"}`), `{"decision":"allow"}`},
		{"/v1/hooks/pre_tool_execution", remoteEvent("code_execution", `{"code": "rm -rf /tmp/x", "language": "bash"}`), `{"decision":"deny","reason":"destructive command"}`},
		{"/v1/hooks/pre_tool_execution", remoteEvent("code_execution", `{"code": "ls", "language": "bash"}`), `{"decision":"deny","reason":"needs approval: \"code_execution\" needs approval by the policy rule at `},
		{"/v1/hooks/pre_tool_execution", remoteEvent("delete_file", `{"path": "/a"}`), `{"decision":"deny","reason":"\"delete_file\" denied by the policy rule at `},
		{"/v1/hooks/PreToolUse", cliEvent("view_file", `{"AbsolutePath": "/w/a"}`), `{"decision":"allow"}`},
		{"/v1/hooks/PreToolUse", cliEvent("run_command", `{"CommandLine": "npm test"}`), `{"decision":"ask","reason":"\"run_command\" needs approval by the policy rule at `},
		{"/v1/hooks/PreToolUse", cliEvent("write_to_file", `{}`), `{"decision":"deny"`},
		// A malformed event is denied, never answered with an error status.
		{"/v1/hooks/pre_tool_execution", `not json`, `{"decision":"deny","reason":"policy service: the event is not a JSON object"}`},
		{"/v1/hooks/pre_tool_execution", cliEvent("read_file", `{}`), `{"decision":"deny","reason":"policy service: the event has no \"tool_call\" object"}`},
		{"/v1/hooks/PreToolUse", `{"toolCall": {"name": "view_file", "args": [1]}}`, `{"decision":"deny","reason":"policy service: the event's toolCall.args is not an object"}`},
	}
	for _, c := range cases {
		code, body := f.post(t, c.path, auth, c.body)
		if code != 200 || !strings.HasPrefix(body, c.want) {
			t.Errorf("%s %s:\n got %d %s\nwant %s", c.path, c.body, code, body, c.want)
		}
	}
	// Every decision's line names the policy file, the rule and its level.
	var lines int
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var l struct {
			Message, Policy, Rule string
			RuleKind              string `json:"rule_kind"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.Message != "policy decision" {
			continue
		}
		lines++
		if l.Policy != f.file || (l.Rule != "default" && !strings.HasPrefix(l.Rule, f.file+":")) || l.RuleKind == "" {
			t.Errorf("log line lacks the rule: %s", line)
		}
	}
	if lines != len(cases) {
		t.Errorf("%d decision lines for %d decisions", lines, len(cases))
	}
	if strings.Contains(f.logs.String(), "rm -rf") {
		t.Error("arguments must not be logged")
	}
	req, _ := http.NewRequest(http.MethodGet, f.url+"/metrics", nil)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(m), `hookgate_policy_decisions_total{decision="ask",dialect="cli",level="tool ask"} 1`) ||
		!strings.Contains(string(m), "hookgate_policy_evaluation_errors_total 3") {
		t.Errorf("metrics:\n%s", m)
	}
}

func TestReload(t *testing.T) {
	f := start(t, basePolicy, nil)
	auth := "Bearer " + token
	ev := remoteEvent("write_file", `{"path": "/workspace/a"}`)
	if _, body := f.post(t, "/v1/hooks/pre_tool_execution", auth, ev); !strings.HasPrefix(body, `{"decision":"deny"`) {
		t.Fatalf("before: %s", body)
	}
	if err := os.WriteFile(f.file, []byte("rules:\n  - allow: write_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, body := f.post(t, "/v1/hooks/pre_tool_execution", auth, ev); body != `{"decision":"allow"}` {
		t.Fatalf("after: %s", body)
	}
	// A broken file leaves the policy in effect.
	if err := os.WriteFile(f.file, []byte("rules:\n  - allow: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Reload(); err == nil || !strings.Contains(err.Error(), f.file+":") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	if _, body := f.post(t, "/v1/hooks/pre_tool_execution", auth, ev); body != `{"decision":"allow"}` {
		t.Fatalf("after a failed reload: %s", body)
	}
}

// approverFixture is an HTTPS approver answering with answer (or holding
// the request until the client gives up, when answer is "hang").
func approverFixture(t *testing.T, answer string) (string, *hookhttp.Client, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Header.Get("X-Hookgate-Policy-Rule")+" "+string(b))
		mu.Unlock()
		if answer == "hang" {
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, answer)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := hookhttp.New(hookhttp.Options{CAFile: caFile, Getenv: func(string) string { return "" }, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	received := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	return srv.URL, client, received
}

func TestAskGoesToApprover(t *testing.T) {
	ev := remoteEvent("code_execution", `{"code": "make", "language": "bash"}`)
	for _, c := range []struct{ answer, want, outcome string }{
		{`{"decision": "allow"}`, `{"decision":"allow","reason":"approved by the approver"}`, `"approver":"allow"`},
		{`{"decision": "deny", "reason": "not now"}`, `{"decision":"deny","reason":"not now"}`, `"approver":"deny"`},
		{`{"decision": "maybe"}`, `{"decision":"deny","reason":"needs approval`, `"approver":"bad-response"`},
		{`garbage`, `{"decision":"deny","reason":"needs approval`, `"approver":"bad-response"`},
		{"hang", `{"decision":"deny","reason":"needs approval`, `"approver":"timeout"`},
	} {
		url, client, received := approverFixture(t, c.answer)
		f := start(t, basePolicy+"approver: "+url+"/v1/approve\napprover_timeout: 300ms\n", client)
		code, body := f.post(t, "/v1/hooks/pre_tool_execution", "Bearer "+token, ev)
		if code != 200 || !strings.HasPrefix(body, c.want) {
			t.Errorf("approver %s: got %d %s", c.answer, code, body)
		}
		if got := received(); len(got) != 1 || got[0] != f.file+":5 "+ev {
			t.Errorf("approver %s received %q", c.answer, got)
		}
		if !strings.Contains(f.logs.String(), c.outcome) {
			t.Errorf("approver %s: the log lacks %s:\n%s", c.answer, c.outcome, f.logs.String())
		}
		// The CLI dialect asks natively: the approver is not involved.
		if _, body := f.post(t, "/v1/hooks/PreToolUse", "Bearer "+token, cliEvent("run_command", `{}`)); !strings.HasPrefix(body, `{"decision":"ask"`) || len(received()) != 1 {
			t.Errorf("CLI ask: %s, approver calls %d", body, len(received()))
		}
	}
	// An unreachable approver denies too.
	client, err := hookhttp.New(hookhttp.Options{Getenv: func(string) string { return "" }, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	f := start(t, basePolicy+"approver: https://"+strings.TrimPrefix(dead.URL, "http://")+"/x\n", client)
	if _, body := f.post(t, "/v1/hooks/pre_tool_execution", "Bearer "+token, ev); !strings.HasPrefix(body, `{"decision":"deny","reason":"needs approval`) {
		t.Errorf("unreachable approver: %s", body)
	}
}

func TestNewRefusesBrokenPolicy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("rules:\n  - deny: [a, a]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{File: file}); err == nil || !strings.Contains(err.Error(), file+":2: rules[0].deny[1]") {
		t.Fatalf("got %v", err)
	}
}
