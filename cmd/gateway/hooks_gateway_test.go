package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/hooks"
	"github.com/hookgate/hookgate/proxy"
	"github.com/hookgate/hookgate/transform"

	"github.com/hookgate/hookgate/internal/testlog"
)

const hookSecret = "hg-hook-canary-91c4e0aa"

// fixedResolver answers every name with one address.
type fixedResolver netip.Addr

func (r fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.Addr(r)}, nil
}

// receivedHook is what the hook receiver saw of one POST.
type receivedHook struct {
	auth, source, idempotencyKey, body string
}

// hookGateway is the audit scenario's gateway side: an HTTPS hook receiver
// for telemetry.example.com and a gateway that injects its bearer token.
type hookGateway struct {
	proxyURL string
	caFile   string
	port     string
	logs     *testlog.Buffer

	mu       sync.Mutex
	received []receivedHook
}

func startHookGateway(t testing.TB, answer string) *hookGateway {
	t.Helper()
	hg := &hookGateway{logs: &testlog.Buffer{}}
	receiver := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hg.mu.Lock()
		hg.received = append(hg.received, receivedHook{
			auth: r.Header.Get("Authorization"), source: r.Header.Get("X-Event-Source"),
			idempotencyKey: r.Header.Get("Idempotency-Key"), body: string(body)})
		hg.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+hookSecret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	receiver.Config.ErrorLog = log.New(io.Discard, "", 0)
	receiver.StartTLS()
	t.Cleanup(receiver.Close)
	_, hg.port, _ = net.SplitHostPort(receiver.Listener.Addr().String())

	dir := t.TempDir()
	certPath, keyPath, err := ca.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	hg.caFile = certPath
	authority, err := ca.Load(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	al, _ := allowlist.New([]string{"telemetry.example.com"})
	addrs, _ := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{
		Exempt: []netip.AddrPort{netip.MustParseAddrPort(receiver.Listener.Addr().String())}})
	rules, err := transform.Compile([]transform.HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:TELEMETRY_TOKEN}"}},
		transform.Options{LookupEnv: func(string) (string, bool) { return hookSecret, true }})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(receiver.Certificate())
	srv, err := proxy.New(proxy.Options{
		Policy:        &config.Policy{Allowlist: al, Addrs: addrs, Entries: []config.Entry{{Transform: rules}}},
		Resolver:      fixedResolver(netip.MustParseAddr("127.0.0.1")),
		UpstreamRoots: roots,
		Logger:        zerolog.New(hg.logs),
		Leaves:        ca.NewLeafCache(authority, 8),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	hg.proxyURL = "http://" + ln.Addr().String()
	return hg
}

// auditHooks is hooks.json with an HTTP hook to the telemetry host: no
// credential anywhere in it.
func (hg *hookGateway) auditHooks(event string) string {
	return fmt.Sprintf(`{"audit": {%q: [{"matcher": "read_file|write_file", "hooks": [
  {"type": "http", "url": "https://telemetry.example.com:%s/api/v1/agent-events",
   "headers": {"X-Event-Source": "agent-sandbox"}, "timeout": 10}]}]}}`, event, hg.port)
}

// TestHTTPHookThroughGateway: the reference audit scenario. The HTTP hook
// POSTs through the gateway; the receiver sees the injected bearer token,
// which neither hooks.json nor the hook runtime ever held, and its deny
// reaches the caller.
func TestHTTPHookThroughGateway(t *testing.T) {
	hg := startHookGateway(t, `{"decision": "deny", "reason": "audit: /etc is off limits"}`)
	hooksJSON := hg.auditHooks("pre_tool_execution")
	root, ws := hooksEnv(t, hooksJSON, "")
	event := `{"tool_call": {"name": "read_file", "args": {"path": "/etc/shadow"}}, "environment_id": "env_audit"}`
	out, errOut, code := runHooksCLI(t, event, "run", "pre_tool_execution", "--root", root, "--workspace", ws,
		"--proxy", hg.proxyURL, "--ca-file", hg.caFile)
	if code != 2 || strings.TrimSpace(out) != `{"decision":"deny","reason":"audit: /etc is off limits"}` {
		t.Fatalf("code %d, stdout %q, stderr %s", code, out, errOut)
	}
	hg.mu.Lock()
	got := append([]receivedHook(nil), hg.received...)
	hg.mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("receiver got %d POSTs", len(got))
	}
	if got[0].auth != "Bearer "+hookSecret || got[0].source != "agent-sandbox" || got[0].idempotencyKey == "" || got[0].body != event {
		t.Fatalf("receiver saw %+v", got[0])
	}
	for name, text := range map[string]string{"hooks.json": hooksJSON, "stdout": out, "stderr": errOut, "gateway log": hg.logs.String()} {
		if strings.Contains(text, hookSecret) {
			t.Errorf("the secret appears in %s", name)
		}
	}
	if !strings.Contains(hg.logs.String(), `"injected":["Authorization"]`) {
		t.Errorf("the gateway's decision line does not name the injected header:\n%s", hg.logs.String())
	}
}

// BenchmarkHTTPHookThroughGateway measures one post_tool_execution HTTP hook
// through the gateway with MITM injection, on loopback, through the Go API
// (what a Go runtime embeds). It reports the median and p99 latency.
func BenchmarkHTTPHookThroughGateway(b *testing.B) {
	hg := startHookGateway(b, `{"decision": "allow"}`)
	root, ws := b.TempDir(), b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".agents"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".agents", "hooks.json"), []byte(hg.auditHooks("post_tool_execution")), 0o644); err != nil {
		b.Fatal(err)
	}
	loaded, problems, err := hooks.Load(hooks.LoadOptions{Workspace: ws, Root: root})
	if err != nil || problems.HasErrors() {
		b.Fatalf("load: %v %v", err, problems)
	}
	client, err := hookhttp.New(hookhttp.Options{Proxy: hg.proxyURL, CAFile: hg.caFile})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	runner := hooks.NewRunner(loaded, hooks.RunnerOptions{HTTP: client})
	ev, err := hooks.ParseEvent(hooks.EventKind("post_tool_execution"),
		[]byte(`{"tool_call": {"name": "write_file", "args": {"path": "a.txt"}}}`), "env_bench")
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		d := runner.Run(context.Background(), ev)
		lat = append(lat, time.Since(start))
		if len(d.Results) != 1 || d.Results[0].Outcome != hooks.OutcomeAllow {
			b.Fatalf("hook result: %+v", d.Results)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
