package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/internal/testlog"
	"github.com/hookgate/hookgate/policy"
)

const testPolicy = `rules:
  - deny: code_execution
    when: 'args.code.matches("rm\\s+-rf")'
    reason: destructive command
  - ask: [code_execution, run_command]
  - allow: [read_file, view_file]
  - deny: {prefix: "mcp__github__"}
  - allow: {prefix: "mcp__github__", tools: [get_issue]}
presets:
  - workspace_only: {paths: [/workspace]}
`

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func runGateway(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	err := run(ctx, args, strings.NewReader(""), &out, &errb)
	code := exitCode(err, &errb)
	return out.String(), errb.String(), code
}

func TestPolicyCheck(t *testing.T) {
	file := writePolicy(t, testPolicy)
	out, errOut, code := runGateway(t, "policy", "check", file)
	if code != 0 {
		t.Fatalf("code %d: %s %s", code, out, errOut)
	}
	for _, want := range []string{
		file + ": ok, 16 rules, default allow",
		"level 0 (tool deny):",
		"deny code_execution              when args.code.matches(\"rm\\\\s+-rf\")  reason \"destructive command\"",
		file + ":10  deny read_file",
		"(presets[0] workspace_only)",
		"level 1 (tool ask):",
		file + ":5  ask [code_execution, run_command]",
		"level 2 (tool allow):",
		file + ":8  allow mcp__github__get_issue",
		"level 3 (prefix deny):",
		file + `:7  deny prefix "mcp__github__"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	bad := writePolicy(t, "rules:\n  - deny: [a, a]\n  - allow: x\n    when: nosuch\n")
	out, errOut, code = runGateway(t, "policy", "check", bad)
	if code != 1 || !strings.Contains(out, bad+`:2: rules[0].deny[1]: "a" is listed twice`) ||
		!strings.Contains(out, bad+":4: rules[1].when: CEL: undeclared reference to 'nosuch'") || !strings.Contains(errOut, "2 problem(s)") {
		t.Fatalf("code %d\n%s\n%s", code, out, errOut)
	}
}

func TestPolicyTestCommand(t *testing.T) {
	file := writePolicy(t, testPolicy)
	cases := []struct {
		tool, args string
		code       int
		want       []string
	}{
		{"code_execution", `{"code": "rm -rf /", "language": "bash"}`, 2, []string{
			"decision: deny", "reason:   destructive command", "rule:     " + file + ":2 (level 0, tool deny, rules[0])",
			"predicates:", file + `:2 deny when args.code.matches("rm\\s+-rf") = true`}},
		{"code_execution", `{"code": "ls"}`, 3, []string{"decision: ask", "rule:     " + file + ":5 (level 1, tool ask, rules[1])", "= false"}},
		{"read_file", `{"path": "/workspace/a"}`, 0, []string{"decision: allow", "level 2, tool allow", `!path.within(args.path, ["/workspace"]) = false`}},
		{"read_file", `{"path": "/workspace/../etc/shadow"}`, 2, []string{"decision: deny", "(preset workspace_only)", "presets[0] workspace_only"}},
		{"mcp__github__delete_repo", `{}`, 2, []string{"level 3, prefix deny"}},
		{"mcp__github__get_issue", `{}`, 0, []string{"level 2, tool allow"}},
		{"search_web", `{}`, 0, []string{"decision: allow", "rule:     none matched; the default of " + file}},
	}
	for _, c := range cases {
		out, errOut, code := runGateway(t, "policy", "test", file, "--tool", c.tool, "--args", c.args)
		if code != c.code {
			t.Errorf("%s %s: code %d, want %d\n%s%s", c.tool, c.args, code, c.code, out, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s %s: output lacks %q:\n%s", c.tool, c.args, w, out)
			}
		}
	}
	// The file may follow the flags; --event reaches the event variable.
	ev := writePolicy(t, "rules:\n  - deny: \"*\"\n    when: event.environment_id == \"env_prod\"\n")
	if _, _, code := runGateway(t, "policy", "test", "--tool", "x", "--event", `{"environment_id": "env_prod"}`, ev); code != 2 {
		t.Errorf("--event: code %d", code)
	}
	// A broken invocation is never mistaken for a deny or an ask.
	for _, args := range [][]string{
		{"policy", "test", file},
		{"policy", "test", file, "--tool", "x", "--args", "[1]"},
		{"policy", "test", file, "--tool", "x", "--nope"},
		{"policy", "test", filepath.Join(t.TempDir(), "missing.yaml"), "--tool", "x"},
	} {
		if _, errOut, code := runGateway(t, args...); code != 1 {
			t.Errorf("%q: code %d, want 1 (%s)", args, code, errOut)
		}
	}
}

// servedPolicy is `gateway policy serve` running in-process.
type servedPolicy struct {
	addr string
	logs *testlog.Buffer
}

func servePolicyInProcess(t *testing.T, args ...string) *servedPolicy {
	t.Helper()
	sp := &servedPolicy{logs: &testlog.Buffer{}}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"policy", "serve", "--listen", "127.0.0.1:0"}, args...), nil, io.Discard, io.MultiWriter(pw, sp.logs))
		pw.Close()
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var l struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "policy service listening" {
				found <- l.Addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case sp.addr = <-found:
	case err := <-done:
		cancel()
		t.Fatalf("policy serve ended at start: %v\n%s", err, sp.logs.String())
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("policy serve did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("policy serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("policy serve did not stop")
		}
	})
	return sp
}

func postHook(t *testing.T, url, auth, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
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

const policyToken = "hg-policy-canary-0b7f3e"

func TestPolicyServe(t *testing.T) {
	file := writePolicy(t, testPolicy)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(policyToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := servePolicyInProcess(t, "--file", file, "--token-file", tokenFile)
	remote := "http://" + sp.addr + "/v1/hooks/pre_tool_execution"
	cli := "http://" + sp.addr + "/v1/hooks/PreToolUse"
	auth := "Bearer " + policyToken
	run := `{"tool_call": {"name": "code_execution", "args": {"code": "make"}}, "environment_id": "e"}`
	for _, a := range []string{"", "Bearer nope"} {
		if code, _ := postHook(t, remote, a, run); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d", a, code)
		}
	}
	if code, body := postHook(t, remote, auth, run); code != 200 || !strings.HasPrefix(body, `{"decision":"deny","reason":"needs approval`) {
		t.Errorf("remote ask: %d %s", code, body)
	}
	if code, body := postHook(t, cli, auth, `{"toolCall": {"name": "run_command", "args": {"CommandLine": "npm test"}}, "stepIdx": 1}`); code != 200 || !strings.HasPrefix(body, `{"decision":"ask"`) {
		t.Errorf("cli ask: %d %s", code, body)
	}
	// SIGHUP reloads the file.
	if err := os.WriteFile(file, []byte("rules:\n  - allow: code_execution\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := postHook(t, remote, auth, run)
		if body == `{"decision":"allow"}` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload after SIGHUP: %s\n%s", body, sp.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := sp.logs.String()
	if !strings.Contains(logs, `"message":"policy reloaded"`) || !strings.Contains(logs, `"rule":"`+file+`:5","rule_level":1,"rule_kind":"tool ask"`) {
		t.Errorf("logs:\n%s", logs)
	}
	if strings.Contains(logs, policyToken) {
		t.Error("the token appears in the log")
	}
}

// TestPolicyLoopThroughGateway is the whole loop: a remote sandbox's HTTP
// hook (gateway hooks run) POSTs through the gateway (gateway serve), which
// injects the bearer token on the way to the policy service (gateway
// policy serve, HTTPS on loopback); the service decides. Neither hooks.json
// nor the hook runtime ever holds the token.
func TestPolicyLoopThroughGateway(t *testing.T) {
	dir := t.TempDir()
	// The policy service's certificate, from an internal CA the gateway
	// trusts as upstream.ca_file.
	internalCert, internalKey, err := ca.Init(filepath.Join(dir, "internal-ca"))
	if err != nil {
		t.Fatal(err)
	}
	internal, err := ca.Load(internalCert, internalKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.NewLeafCache(internal, 1).Get("policy.example.com")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "policy.pem"), filepath.Join(dir, "policy-key.pem")
	var chain []byte
	for _, der := range leaf.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	tokenFile := filepath.Join(dir, "policy-token")
	for name, data := range map[string][]byte{
		certFile: chain, keyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), tokenFile: []byte(policyToken),
	} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sp := servePolicyInProcess(t, "--file", writePolicy(t, testPolicy), "--token-file", tokenFile, "--tls-cert", certFile, "--tls-key", keyFile)
	_, port, _ := strings.Cut(sp.addr, ":")

	// The gateway: policy.example.com resolves to the service, and the
	// gateway adds the token read from the same file.
	gwCA := filepath.Join(dir, "gateway-ca")
	if _, _, err := ca.Init(gwCA); err != nil {
		t.Fatal(err)
	}
	dnsAddr := testDNS(t, map[string]string{"policy.example.com": "127.0.0.1"})
	gwConfig := fmt.Sprintf(`network:
  allowlist:
    - domain: policy.example.com
      transform:
        Authorization: "Bearer ${file:%s}"
  dns: {servers: [%q]}
upstream: {ca_file: %q}
ca: {cert_file: %q, key_file: %q}
limits: {shutdown_grace: 3s}
`, tokenFile, dnsAddr, internalCert, filepath.Join(gwCA, "ca.pem"), filepath.Join(gwCA, "ca-key.pem"))
	sg := serveInProcess(t, gwConfig, "--test-allow-upstream", "127.0.0.1:"+port)

	hooksJSON := fmt.Sprintf(`{"policy-gate": {"pre_tool_execution": [{"matcher": "*", "hooks": [
  {"type": "http", "url": "https://policy.example.com:%s/v1/hooks/pre_tool_execution", "timeout": 10}]}]}}`, port)
	root, ws := hooksEnv(t, hooksJSON, "")
	hookArgs := []string{"run", "pre_tool_execution", "--root", root, "--workspace", ws,
		"--proxy", "http://" + sg.proxyAddr, "--ca-file", filepath.Join(gwCA, "ca.pem")}
	cases := []struct {
		event string
		code  int
		out   string
	}{
		{`{"tool_call": {"name": "code_execution", "args": {"code": "rm -rf /tmp/forbidden", "language": "bash"}}, "environment_id": "env_1"}`,
			2, `{"decision":"deny","reason":"destructive command"}`},
		{`{"tool_call": {"name": "read_file", "args": {"path": "/workspace/notes.md"}}, "environment_id": "env_1"}`,
			0, `{"decision":"allow"}`},
		{`{"tool_call": {"name": "read_file", "args": {"path": "/workspace/../etc/shadow"}}, "environment_id": "env_1"}`,
			2, `{"decision":"deny","reason":"read_file may only touch paths inside /workspace (preset workspace_only)"}`},
		{`{"tool_call": {"name": "code_execution", "args": {"code": "make"}}, "environment_id": "env_1"}`,
			2, `{"decision":"deny","reason":"needs approval: \"code_execution\" needs approval by the policy rule at `},
	}
	for _, c := range cases {
		out, errOut, code := runHooksCLI(t, c.event, hookArgs...)
		if code != c.code || !strings.HasPrefix(strings.TrimSpace(out), c.out) {
			t.Errorf("%s:\n code %d, stdout %s\nstderr %s", c.event, code, out, errOut)
		}
		if strings.Contains(out+errOut, policyToken) {
			t.Error("the token reached the hook runtime's output")
		}
	}
	if !strings.Contains(sg.logs.String(), `"injected":["Authorization"]`) {
		t.Errorf("the gateway did not inject the token:\n%s", sg.logs.String())
	}
	if n := strings.Count(sp.logs.String(), `"message":"policy decision"`); n != len(cases) {
		t.Errorf("%d decisions logged by the service, want %d", n, len(cases))
	}
	for name, text := range map[string]string{"hooks.json": hooksJSON, "gateway log": sg.logs.String(), "policy log": sp.logs.String()} {
		if strings.Contains(text, policyToken) {
			t.Errorf("the token appears in the %s", name)
		}
	}
}

// The documented example (configs/policy) loads and decides as its
// comments say.
func TestPolicyExampleConfig(t *testing.T) {
	p, err := policy.Load("../../configs/policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Approver() != "https://approvals.example.com/v1/decide" || p.ApproverTimeout() != 20*time.Second {
		t.Errorf("approver %q %s", p.Approver(), p.ApproverTimeout())
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		want policy.Action
	}{
		{"code_execution", map[string]any{"code": "rm -rf /", "language": "bash"}, policy.Deny},
		{"code_execution", map[string]any{"code": "make test", "language": "bash"}, policy.Ask},
		{"run_command", map[string]any{"CommandLine": "dd if=/dev/zero of=/dev/sda"}, policy.Deny},
		{"run_command", map[string]any{"CommandLine": "npm test"}, policy.Ask},
		{"read_file", map[string]any{"path": "/workspace/src/main.go"}, policy.Allow},
		{"read_file", map[string]any{"path": "/workspace/app/.env"}, policy.Deny},
		{"view_file", map[string]any{"AbsolutePath": "/workspace/.env"}, policy.Deny},
		{"view_file", map[string]any{"AbsolutePath": "/workspace/README.md"}, policy.Allow},
		{"write_to_file", map[string]any{"TargetFile": "/workspace/../root/.ssh/authorized_keys"}, policy.Deny},
		{"write_file", map[string]any{"path": "/workspace-evil/x"}, policy.Deny},
		{"mcp__github__get_issue", nil, policy.Allow},
		{"mcp__github__delete_repo", nil, policy.Deny},
		{"search_web", map[string]any{"query": "go"}, policy.Allow},
	} {
		if d := p.Decide(context.Background(), policy.Input{Tool: c.tool, Args: c.args}); d.Action != c.want {
			t.Errorf("%s %v: %s (%s), want %s", c.tool, c.args, d.Action, d.Reason, c.want)
		}
	}
	hooksJSON, err := os.ReadFile("../../configs/policy/hooks.json")
	if err != nil {
		t.Fatal(err)
	}
	root, ws := hooksEnv(t, string(hooksJSON), "")
	if out, errOut, code := runGateway(t, "hooks", "check", "--root", root, "--workspace", ws); code != 0 || strings.Contains(out+errOut, "warning") {
		t.Errorf("configs/policy/hooks.json: code %d\n%s%s", code, out, errOut)
	}
}
