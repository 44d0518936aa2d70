package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const pprofTestToken = "pprof-admin-token-5b1e0c"

// pprofConfig is a small gateway config with an admin token and the given
// admin block's extra fields.
func pprofConfig(t *testing.T, adminExtra string) string {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(pprofTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("network:\n  allowlist: [{domain: example.com}]\nadmin:\n  token_file: %q\n%s", tokenFile, adminExtra)
}

// adminAuth is admin with the bearer token (none when token is "").
func (sg *servedGateway) adminAuth(t *testing.T, method, path, token string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+sg.adminAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestServePprofOffByDefault(t *testing.T) {
	sg := serveInProcess(t, pprofConfig(t, ""))
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap"} {
		if code, _, body := sg.adminAuth(t, "GET", path, pprofTestToken); code != 404 {
			t.Errorf("GET %s without admin.pprof: %d %.100q, want 404", path, code, body)
		}
	}
}

// TestServePprof: with admin.pprof the served gateway hands out profiles
// to the token only; /v1/config says so; a reload cannot turn them off (or
// on): the setting is read at start, and the reload names it pending.
func TestServePprof(t *testing.T) {
	cfg := pprofConfig(t, "  pprof: true\n")
	sg := serveInProcess(t, cfg)

	code, hdr, body := sg.adminAuth(t, "GET", "/debug/pprof/heap", pprofTestToken)
	if code != 200 || !strings.HasPrefix(body, "\x1f\x8b") || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("heap profile: %d %q %.20q, want 200, no-store, gzip", code, hdr.Get("Cache-Control"), body)
	}
	if code, _, _ := sg.adminAuth(t, "GET", "/debug/pprof/", pprofTestToken); code != 200 {
		t.Errorf("index: %d", code)
	}
	if code, _, _ := sg.adminAuth(t, "GET", "/debug/pprof/goroutine?debug=2", ""); code != 401 {
		t.Errorf("goroutine dump without the token: %d, want 401", code)
	}

	var view struct {
		PendingRestart []string `json:"pending_restart"`
		Admin          struct {
			Pprof bool `json:"pprof"`
		} `json:"admin"`
	}
	_, _, raw := sg.adminAuth(t, "GET", "/v1/config", pprofTestToken)
	if err := json.Unmarshal([]byte(raw), &view); err != nil || !view.Admin.Pprof {
		t.Fatalf("/v1/config admin.pprof: %v %s", err, raw)
	}

	sg.rewrite(t, strings.Replace(cfg, "  pprof: true\n", "  pprof: false\n", 1))
	code, _, body = sg.adminAuth(t, "POST", "/v1/reload", pprofTestToken)
	if code != 200 || !strings.Contains(body, `"pending_restart":["admin.pprof"]`) {
		t.Fatalf("reload turning pprof off: %d %s", code, body)
	}
	if code, _, _ := sg.adminAuth(t, "GET", "/debug/pprof/heap", pprofTestToken); code != 200 {
		t.Errorf("after the reload: heap %d, want 200 until a restart", code)
	}
	_, _, raw = sg.adminAuth(t, "GET", "/v1/config", pprofTestToken)
	if err := json.Unmarshal([]byte(raw), &view); err != nil || !view.Admin.Pprof || fmt.Sprint(view.PendingRestart) != "[admin.pprof]" {
		t.Errorf("/v1/config after the reload: %v %s", err, raw)
	}
}

// The start-up line says what the Go runtime was sized for.
func TestServeLogsRuntimeLimits(t *testing.T) {
	sg := serveInProcess(t, pprofConfig(t, ""))
	// The log buffer gets each line just after the pipe serve's start was
	// read from.
	sg.logs.Wait(t, 5*time.Second, func(text string) bool { return strings.Contains(text, `"gateway listening"`) })
	lines := sg.logLines(t, "gateway listening")
	if len(lines) != 1 {
		t.Fatalf("%d start-up lines:\n%s", len(lines), sg.logs.String())
	}
	l := lines[0]
	if l["gomaxprocs"] != float64(runtime.GOMAXPROCS(0)) {
		t.Errorf("gomaxprocs = %v, want %d", l["gomaxprocs"], runtime.GOMAXPROCS(0))
	}
	switch l["gomemlimit_from"] {
	case memoryLimitFromNone:
		if _, ok := l["gomemlimit_bytes"]; ok {
			t.Errorf("no memory limit, but the line has gomemlimit_bytes: %v", l)
		}
	case memoryLimitFromEnv, memoryLimitFromCgroup:
		if n, _ := l["gomemlimit_bytes"].(float64); n <= 0 {
			t.Errorf("a memory limit from %v without gomemlimit_bytes: %v", l["gomemlimit_from"], l)
		}
	default:
		t.Errorf("gomemlimit_from = %v", l["gomemlimit_from"])
	}
}

// TestShutdownGraceWithProfileInFlight: a CPU profile running on the admin
// API when the gateway is stopped neither holds up the proxy's shutdown
// nor outlives the grace: the proxy stops accepting, its request in flight
// finishes, the profile is cut when the grace ends, and serve returns.
func TestShutdownGraceWithProfileInFlight(t *testing.T) {
	e := newOpsEnv(t)
	sg := serveInProcess(t, e.config("example.com")+strings.TrimPrefix(pprofConfig(t, "  pprof: true\n"), "network:\n  allowlist: [{domain: example.com}]\n"), e.args()...)

	profiled := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+sg.adminAddr+"/debug/pprof/profile?seconds=30", nil)
		req.Header.Set("Authorization", "Bearer "+pprofTestToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		profiled <- err
	}()
	// The goroutine dump shows the profile's handler waiting out its 30 s.
	for i := 0; ; i++ {
		_, _, dump := sg.adminAuth(t, "GET", "/debug/pprof/goroutine?debug=2", pprofTestToken)
		if strings.Contains(dump, "net/http/pprof.Profile(") {
			break
		}
		if i == 250 {
			t.Fatalf("the 30 s profile did not start:\n%s", dump)
		}
		time.Sleep(20 * time.Millisecond)
	}

	c := e.client(sg)
	result := make(chan string, 1)
	go func() {
		code, body := get(t, c, e.url("example.com", "/slow"))
		result <- fmt.Sprintf("%d %s", code, body)
	}()
	select {
	case <-e.slowArrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	sg.stop()
	// The upstream answers only once the proxy has stopped accepting: its
	// shutdown has begun, with the request still in flight.
	for i := 0; ; i++ {
		conn, err := net.DialTimeout("tcp", sg.proxyAddr, time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if i == 200 {
			t.Fatal("the proxy still accepts connections after the shutdown began")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(e.releaseSlow)
	if got := <-result; !strings.HasPrefix(got, "200 ") {
		t.Errorf("request in flight during the shutdown: %s", got)
	}
	if err := <-profiled; err == nil {
		t.Error("the 30 s profile was answered in full; it should have been cut at the end of the grace")
	}
	c.CloseIdleConnections()
	if err := <-sg.done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	sg.done <- nil // for the cleanup
}
