package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

const testToken = "s3cret-test-token-do-not-log"

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// startReceiver serves the router over TLS with a certificate made by
// loadOrCreateCert, and returns a client that trusts exactly that
// certificate, never by switching verification off.
func startReceiver(t *testing.T) (*httptest.Server, *http.Client, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	cert, _, err := loadOrCreateCert("", "", dir, []string{"127.0.0.1", "localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	srv := httptest.NewUnstartedServer(newRouter(testToken, zerolog.New(logs)))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	pemBytes, err := os.ReadFile(filepath.Join(dir, certFileName))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatal("cert.pem holds no certificate")
	}
	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
		Timeout:   5 * time.Second,
	}
	t.Cleanup(client.CloseIdleConnections)
	return srv, client, logs
}

func post(t *testing.T, c *http.Client, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestToken(t *testing.T) {
	srv, c, logs := startReceiver(t)
	ev := `{"tool_call":{"name":"read_file","args":{"path":"/x"}},"environment_id":"env_1"}`
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "not-the-token", http.StatusUnauthorized},
		{"prefix", testToken[:5], http.StatusUnauthorized},
		{"right", testToken, http.StatusOK},
	} {
		for _, path := range []string{"/api/v1/pre-tool", "/api/v1/agent-events"} {
			if got, body := post(t, c, srv.URL+path, tc.token, ev); got != tc.want {
				t.Errorf("%s token on %s: status %d (%s), want %d", tc.name, path, got, body, tc.want)
			}
		}
	}
	// Health checks need no token.
	resp, err := c.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
	if strings.Contains(logs.String(), testToken[:5]) {
		t.Errorf("the token (or part of it) was logged:\n%s", logs)
	}
}

func TestPreTool(t *testing.T) {
	srv, c, logs := startReceiver(t)
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"code_execution", `{"code":"ls -la","language":"bash"}`, "allow"},
		{"code_execution", `{"code":"rm -rf /tmp/x","language":"bash"}`, "deny"},
		{"code_execution", `{"code":"echo hi && rm  -fr /","language":"bash"}`, "deny"},
		{"code_execution", `{"code":"rm -v -Rf /tmp/x"}`, "deny"},
		{"code_execution", `{"code":"rm\u0020-rf /"}`, "deny"},        // an escape hides nothing
		{"code_execution", `{"argv":["sh","-c","rm -rf /"]}`, "deny"}, // nested values are searched
		{"code_execution", `{"code":"rm -r dir"}`, "allow"},
		{"code_execution", `{"code":"echo firm -rfoo"}`, "allow"},
		{"read_file", `{"path":"rm -rf"}`, "allow"}, // only code_execution is gated
	} {
		ev := `{"tool_call":{"name":"` + tc.tool + `","args":` + tc.args + `},"environment_id":"env_gate"}`
		status, body := post(t, c, srv.URL+"/api/v1/pre-tool", testToken, ev)
		if status != http.StatusOK {
			t.Fatalf("%s %s: status %d (%s)", tc.tool, tc.args, status, body)
		}
		var d decision
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("%s: answer %q: %v", tc.args, body, err)
		}
		if d.Decision != tc.want {
			t.Errorf("%s %s: decision %q, want %q", tc.tool, tc.args, d.Decision, tc.want)
		}
		if d.Decision == "deny" && !strings.Contains(d.Reason, "rm -rf") {
			t.Errorf("deny without a telling reason: %q", d.Reason)
		}
	}
	if !strings.Contains(logs.String(), `"decision":"deny"`) {
		t.Errorf("no deny decision logged:\n%s", logs)
	}
}

func TestAuditLogged(t *testing.T) {
	srv, c, logs := startReceiver(t)
	ev := `{"tool_call":{"name":"read_file","args":{"path":"/workspace/notes.txt"}},"environment_id":"env_audit"}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/agent-events", strings.NewReader(ev))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("X-Event-Source", "agent-sandbox")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"decision":"allow"}` {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}

	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["message"] == "audit" {
			found = true
			if m["tool"] != "read_file" || m["environment_id"] != "env_audit" || m["source"] != "agent-sandbox" {
				t.Errorf("audit line: %s", line)
			}
		}
	}
	if !found {
		t.Errorf("no audit line logged:\n%s", logs)
	}
	if strings.Contains(logs.String(), testToken) {
		t.Errorf("the token was logged")
	}
}

func TestBadRequests(t *testing.T) {
	srv, c, _ := startReceiver(t)
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"not JSON", `{"tool_call":`, http.StatusBadRequest},
		{"no tool", `{"environment_id":"e"}`, http.StatusBadRequest},
		{"trailing data", `{"tool_call":{"name":"x"}} {}`, http.StatusBadRequest},
		{"wrong type", `{"tool_call":"read_file"}`, http.StatusBadRequest},
		{"too big", `{"tool_call":{"name":"x","args":{"p":"` + strings.Repeat("a", maxBody) + `"}}}`, http.StatusRequestEntityTooLarge},
	} {
		for _, path := range []string{"/api/v1/pre-tool", "/api/v1/agent-events"} {
			if got, body := post(t, c, srv.URL+path, testToken, tc.body); got != tc.want {
				t.Errorf("%s on %s: %d (%s), want %d", tc.name, path, got, body, tc.want)
			}
		}
	}
	resp, err := c.Get(srv.URL + "/api/v1/pre-tool")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /api/v1/pre-tool: %d", resp.StatusCode)
	}
}

func TestCertReusedAndRegenerated(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	_, src, err := loadOrCreateCert("", "", dir, []string{"telemetry.example.com"}, now)
	if err != nil || !strings.Contains(src, "created") {
		t.Fatalf("first start: %q, %v", src, err)
	}
	fi, err := os.Stat(filepath.Join(dir, keyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem: %v, %v", fi, err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, certFileName))

	if _, src, err = loadOrCreateCert("", "", dir, []string{"telemetry.example.com"}, now); err != nil || !strings.Contains(src, "reused") {
		t.Fatalf("restart: %q, %v", src, err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, certFileName)); !bytes.Equal(first, again) {
		t.Error("cert.pem changed on restart")
	}
	// Another name, or a certificate about to expire: a new one.
	if _, src, _ = loadOrCreateCert("", "", dir, []string{"receiver"}, now); !strings.Contains(src, "created") {
		t.Errorf("new hostname: %q", src)
	}
	if _, src, _ = loadOrCreateCert("", "", dir, []string{"receiver"}, now.AddDate(1, 0, 0)); !strings.Contains(src, "created") {
		t.Errorf("expiring: %q", src)
	}
}

func TestOptions(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if _, err := parseOptions(nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "RECEIVER_TOKEN") {
		t.Errorf("no token: %v", err)
	}
	env["RECEIVER_TOKEN"] = "t"
	env["RECEIVER_LISTEN"] = ":443"
	o, err := parseOptions([]string{"-hostnames", " a.example , 10.0.0.1,"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != ":443" || len(o.hostnames) != 2 || o.hostnames[1] != "10.0.0.1" {
		t.Errorf("options: %+v", o)
	}
}
