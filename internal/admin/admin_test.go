package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/admin"

	"github.com/hookgate/hookgate/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testToken = "s3cret-admin-token-DO-NOT-LOG"
	wrongTok  = "wrong-token-ALSO-NOT-LOGGED"
	testPEM   = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
)

type fixture struct {
	srv *httptest.Server
	log *testlog.Buffer
}

// start serves admin.New(o) on a real socket; o.Logger is set to a
// debug-level JSON logger the test can read.
func start(t *testing.T, o admin.Options) *fixture {
	t.Helper()
	f := &fixture{log: &testlog.Buffer{}}
	o.Logger = zerolog.New(f.log).Level(zerolog.DebugLevel)
	f.srv = httptest.NewServer(admin.New(o))
	t.Cleanup(f.srv.Close)
	return f
}

// fullOptions configures every route.
func fullOptions() admin.Options {
	var gen atomic.Uint64
	gen.Store(1)
	return admin.Options{
		Ready:   func() error { return nil },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hookgate_up 1\n") }),
		CAPEM:   func() []byte { return []byte(testPEM) },
		Config:  func() any { return map[string]any{"listen": map[string]string{"proxy": "127.0.0.1:3128"}} },
		Reload: func(context.Context) (admin.ReloadResult, error) {
			return admin.ReloadResult{Generation: gen.Add(1)}, nil
		},
		Decisions: func(limit int) any {
			return []map[string]any{{"host": "example.org", "verdict": "deny", "limit_seen": limit}}
		},
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) do(t *testing.T, method, path, auth string) response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(body)}
}

// jsonError decodes {"error": "..."} and fails if the body is not that.
func jsonError(t *testing.T, r response) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error == "" {
		t.Fatalf("body is not a JSON error: %q (%v)", r.body, err)
	}
	return e.Error
}

var protected = []struct{ method, path string }{
	{http.MethodGet, "/metrics"},
	{http.MethodGet, "/ca.pem"},
	{http.MethodGet, "/v1/config"},
	{http.MethodPost, "/v1/reload"},
	{http.MethodGet, "/v1/decisions"},
}

func TestRoutes(t *testing.T) {
	f := start(t, fullOptions())
	tests := []struct {
		method, path string
		status       int
		ctype        string
		body         string // substring
	}{
		{"GET", "/healthz", 200, "text/plain; charset=utf-8", "ok"},
		{"HEAD", "/healthz", 200, "text/plain; charset=utf-8", ""},
		{"GET", "/readyz", 200, "text/plain; charset=utf-8", "ok"},
		{"GET", "/metrics", 200, "", "hookgate_up 1"},
		{"GET", "/ca.pem", 200, "application/x-pem-file", testPEM},
		{"GET", "/v1/config", 200, "application/json", `{"listen":{"proxy":"127.0.0.1:3128"}}`},
		{"POST", "/v1/reload", 200, "application/json", `{"generation":2,"pending_restart":[]}`},
		{"GET", "/v1/decisions", 200, "application/json", `"host":"example.org"`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := f.do(t, tt.method, tt.path, "")
			if r.status != tt.status {
				t.Fatalf("status %d, want %d; body %q", r.status, tt.status, r.body)
			}
			if tt.ctype != "" && r.header.Get("Content-Type") != tt.ctype {
				t.Errorf("Content-Type %q, want %q", r.header.Get("Content-Type"), tt.ctype)
			}
			if !strings.Contains(r.body, tt.body) {
				t.Errorf("body %q does not contain %q", r.body, tt.body)
			}
			if r.header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", r.header.Get("Cache-Control"))
			}
		})
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	f := start(t, fullOptions())

	r := f.do(t, "GET", "/nope", "")
	if r.status != 404 {
		t.Fatalf("status %d, want 404", r.status)
	}
	if msg := jsonError(t, r); !strings.Contains(msg, "/nope") {
		t.Errorf("error %q does not name the path", msg)
	}

	tests := []struct{ method, path, allow string }{
		{"GET", "/v1/reload", "POST"},
		{"DELETE", "/v1/config", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := f.do(t, tt.method, tt.path, "")
			if r.status != 405 {
				t.Fatalf("status %d, want 405", r.status)
			}
			jsonError(t, r)
			if got := r.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestUnconfiguredRoutes(t *testing.T) {
	f := start(t, admin.Options{})
	for _, tt := range protected {
		t.Run(tt.path, func(t *testing.T) {
			r := f.do(t, tt.method, tt.path, "")
			if r.status != 404 {
				t.Fatalf("status %d, want 404", r.status)
			}
			jsonError(t, r)
		})
	}
	// Without a Ready func the gateway counts as ready.
	if r := f.do(t, "GET", "/readyz", ""); r.status != 200 {
		t.Errorf("/readyz without Ready: %d, want 200", r.status)
	}
}

func TestCAPEMNotConfigured(t *testing.T) {
	for name, fn := range map[string]func() []byte{
		"nil func": nil,
		"empty":    func() []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			f := start(t, admin.Options{CAPEM: fn})
			r := f.do(t, "GET", "/ca.pem", "")
			if r.status != 404 {
				t.Fatalf("status %d, want 404", r.status)
			}
			if msg := jsonError(t, r); !strings.Contains(msg, "no CA is configured") {
				t.Errorf("error %q does not say no CA is configured", msg)
			}
		})
	}
}

func TestReadyz(t *testing.T) {
	var notReady atomic.Bool
	notReady.Store(true)
	o := admin.Options{
		Token: testToken, // health checks must not need it
		Ready: func() error {
			if notReady.Load() {
				return errors.New("proxy listener not up")
			}
			return nil
		},
	}
	f := start(t, o)
	r := f.do(t, "GET", "/readyz", "")
	if r.status != 503 {
		t.Fatalf("status %d, want 503", r.status)
	}
	if msg := jsonError(t, r); !strings.Contains(msg, "proxy listener not up") {
		t.Errorf("error %q does not carry Ready's error", msg)
	}
	notReady.Store(false)
	if r := f.do(t, "GET", "/readyz", ""); r.status != 200 || r.body != "ok\n" {
		t.Errorf("ready: %d %q, want 200 ok", r.status, r.body)
	}
	if r := f.do(t, "GET", "/healthz", ""); r.status != 200 || r.body != "ok\n" {
		t.Errorf("/healthz without token: %d %q, want 200 ok", r.status, r.body)
	}
}

func TestAuth(t *testing.T) {
	o := fullOptions()
	o.Token = testToken + "\n" // as read from a file: the newline is ignored
	f := start(t, o)

	for _, p := range protected {
		t.Run(p.method+" "+p.path, func(t *testing.T) {
			tests := []struct {
				name      string
				auth      string
				status    int
				challenge string
			}{
				{"no header", "", 401, `Bearer realm="hookgate-admin"`},
				{"wrong token", "Bearer " + wrongTok, 401, `Bearer realm="hookgate-admin", error="invalid_token"`},
				{"token prefix", "Bearer " + testToken[:len(testToken)-1], 401, `Bearer realm="hookgate-admin", error="invalid_token"`},
				{"token plus suffix", "Bearer " + testToken + "x", 401, `Bearer realm="hookgate-admin", error="invalid_token"`},
				{"basic scheme", "Basic " + testToken, 401, `Bearer realm="hookgate-admin"`},
				{"bare token", testToken, 401, `Bearer realm="hookgate-admin"`},
				{"empty bearer", "Bearer ", 401, `Bearer realm="hookgate-admin"`},
				{"right token", "Bearer " + testToken, 200, ""},
				{"scheme any case", "bearer " + testToken, 200, ""},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r := f.do(t, p.method, p.path, tt.auth)
					if r.status != tt.status {
						t.Fatalf("status %d, want %d; body %q", r.status, tt.status, r.body)
					}
					if got := r.header.Get("WWW-Authenticate"); got != tt.challenge {
						t.Errorf("WWW-Authenticate %q, want %q", got, tt.challenge)
					}
					if tt.status == 401 {
						jsonError(t, r)
						if strings.Contains(r.body, testToken) {
							t.Errorf("401 body reveals the token: %q", r.body)
						}
					}
				})
			}
		})
	}

	t.Run("health checks need no token", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if r := f.do(t, "GET", path, ""); r.status != 200 {
				t.Errorf("%s without token: %d", path, r.status)
			}
			if r := f.do(t, "GET", path, "Bearer "+wrongTok); r.status != 200 {
				t.Errorf("%s with a wrong token: %d", path, r.status)
			}
		}
	})

	t.Run("log never holds a token", func(t *testing.T) {
		logs := f.log.String()
		for _, secret := range []string{testToken, wrongTok, "Bearer", "Authorization"} {
			if strings.Contains(logs, secret) {
				t.Errorf("admin log contains %q:\n%s", secret, logs)
			}
		}
	})
}

func TestNoTokenNoAuth(t *testing.T) {
	f := start(t, fullOptions())
	for _, p := range protected {
		if r := f.do(t, p.method, p.path, ""); r.status != 200 {
			t.Errorf("%s %s without token configured: %d, want 200", p.method, p.path, r.status)
		}
		// A stray header does not matter either.
		if r := f.do(t, p.method, p.path, "Bearer whatever"); r.status != 200 {
			t.Errorf("%s %s with a stray token: %d, want 200", p.method, p.path, r.status)
		}
	}
}

func TestBlankTokenFailsClosed(t *testing.T) {
	o := fullOptions()
	o.Token = " \n"
	f := start(t, o)
	for _, auth := range []string{"", "Bearer ", "Bearer   ", "Bearer x"} {
		if r := f.do(t, "GET", "/v1/config", auth); r.status != 401 {
			t.Errorf("blank token, Authorization %q: %d, want 401", auth, r.status)
		}
	}
	if r := f.do(t, "GET", "/healthz", ""); r.status != 200 {
		t.Errorf("/healthz: %d", r.status)
	}
	if !strings.Contains(f.log.String(), "admin token is blank") {
		t.Error("no warning logged about the blank token")
	}
}

func TestReload(t *testing.T) {
	const cfgErr = "configs/gateway.yaml:12: network.allowlist[3].domain: \"https://x.example\" is a URL, not a host; write \"x.example\""
	var fail atomic.Bool
	var gen atomic.Uint64
	gen.Store(4)
	o := admin.Options{
		Token: testToken,
		Reload: func(ctx context.Context) (admin.ReloadResult, error) {
			if ctx.Err() != nil {
				t.Error("Reload got a dead context")
			}
			if fail.Load() {
				return admin.ReloadResult{Generation: gen.Load()}, errors.New(cfgErr)
			}
			g := gen.Add(1)
			if g == 6 {
				return admin.ReloadResult{Generation: g, PendingRestart: []string{"listen.admin"}}, nil
			}
			return admin.ReloadResult{Generation: g}, nil
		},
	}
	f := start(t, o)
	auth := "Bearer " + testToken

	r := f.do(t, "POST", "/v1/reload", auth)
	if want := "{\"generation\":5,\"pending_restart\":[]}\n"; r.status != 200 || r.body != want {
		t.Fatalf("reload: %d %q, want 200 %q", r.status, r.body, want)
	}

	fail.Store(true)
	r = f.do(t, "POST", "/v1/reload", auth)
	if r.status != 422 {
		t.Fatalf("failed reload: status %d, want 422", r.status)
	}
	if msg := jsonError(t, r); msg != cfgErr {
		t.Errorf("error %q, want exactly %q", msg, cfgErr)
	}

	fail.Store(false)
	if r := f.do(t, "POST", "/v1/reload", auth); r.status != 200 || r.body != "{\"generation\":6,\"pending_restart\":[\"listen.admin\"]}\n" {
		t.Errorf("reload after a failure: %d %q", r.status, r.body)
	}
}

func TestConcurrentReloadsAreSerialised(t *testing.T) {
	var inFlight, maxInFlight atomic.Int32
	var gen atomic.Uint64
	o := admin.Options{
		Reload: func(context.Context) (admin.ReloadResult, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := maxInFlight.Load()
				if n <= m || maxInFlight.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond) // widen the window for overlap
			return admin.ReloadResult{Generation: gen.Add(1)}, nil
		},
	}
	f := start(t, o)

	const n = 16
	gens := make(chan uint64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := f.srv.Client().Post(f.srv.URL+"/v1/reload", "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var body struct{ Generation uint64 }
			if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&body) != nil {
				t.Errorf("status %d", resp.StatusCode)
				return
			}
			gens <- body.Generation
		})
	}
	wg.Wait()
	close(gens)

	if m := maxInFlight.Load(); m != 1 {
		t.Errorf("%d reloads ran at once, want 1", m)
	}
	seen := map[uint64]bool{}
	for g := range gens {
		if seen[g] {
			t.Errorf("generation %d answered twice", g)
		}
		seen[g] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct generations, want %d", len(seen), n)
	}
}

func TestReloadWaitAbandoned(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	o := admin.Options{
		Reload: func(context.Context) (admin.ReloadResult, error) {
			if calls.Add(1) == 1 {
				close(entered)
				<-release
			}
			return admin.ReloadResult{Generation: uint64(calls.Load())}, nil
		},
	}
	f := start(t, o)

	first := make(chan int, 1)
	go func() {
		resp, err := f.srv.Client().Post(f.srv.URL+"/v1/reload", "", nil)
		if err != nil {
			t.Error(err)
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-entered

	// A second reload waits; its client gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/reload", nil)
	if resp, err := f.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("second reload answered %d while the first was running", resp.StatusCode)
	}

	// Let the server see the client go before the first reload ends.
	f.log.Wait(t, 5*time.Second, func(s string) bool { return strings.Contains(s, `"status":503`) })
	close(release)
	if s := <-first; s != 200 {
		t.Fatalf("first reload: %d", s)
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("Reload called %d times, want 1 (the abandoned request must not reload)", c)
	}
	// The lock was released: a new reload goes through.
	if r := f.do(t, "POST", "/v1/reload", ""); r.status != 200 {
		t.Errorf("reload after an abandoned wait: %d", r.status)
	}
}

func TestDecisionsLimit(t *testing.T) {
	var got atomic.Int64
	o := admin.Options{Decisions: func(limit int) any {
		got.Store(int64(limit))
		return []string{}
	}}
	f := start(t, o)
	tests := []struct {
		query  string
		status int
		limit  int
	}{
		{"", 200, 100},
		{"?limit=1", 200, 1},
		{"?limit=5", 200, 5},
		{"?limit=1000", 200, 1000},
		{"?limit=1001", 400, 0},                 // above the maximum: refused, not shortened
		{"?limit=99999999999999999999", 400, 0}, // overflows int
		{"?limit=0", 400, 0},
		{"?limit=-1", 400, 0},
		{"?limit=+5", 400, 0},
		{"?limit=abc", 400, 0},
		{"?limit=1.5", 400, 0},
		{"?limit=", 400, 0},
		{"?limit=%20", 400, 0},
		{"?limit=1&limit=2", 400, 0},
		{"?other=1", 200, 100},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got.Store(-1)
			r := f.do(t, "GET", "/v1/decisions"+tt.query, "")
			if r.status != tt.status {
				t.Fatalf("status %d, want %d; body %q", r.status, tt.status, r.body)
			}
			if tt.status != 200 {
				msg := jsonError(t, r)
				if !strings.Contains(msg, "limit") {
					t.Errorf("error %q does not name limit", msg)
				}
				if tt.query == "?limit=1001" && !strings.Contains(msg, "maximum") {
					t.Errorf("error %q does not name the maximum", msg)
				}
				if got.Load() != -1 {
					t.Error("Decisions was called for a bad limit")
				}
				return
			}
			if got.Load() != int64(tt.limit) {
				t.Errorf("Decisions got limit %d, want %d", got.Load(), tt.limit)
			}
			if r.body != "[]\n" {
				t.Errorf("body %q, want []", r.body)
			}
		})
	}
}

// The admin API encodes what the caller gives it, verbatim: a secret
// reference stays a reference (the caller, not admin, owns redaction).
func TestReferencesReturnedAsIs(t *testing.T) {
	const ref = "Bearer ${env:X}"
	ring := admin.NewRing[map[string]string](10)
	ring.Add(map[string]string{"host": "telemetry.example.com", "header": ref})
	o := admin.Options{
		Config: func() any {
			return map[string]any{"network": map[string]any{"allowlist": []any{
				map[string]any{"domain": "telemetry.example.com", "transform": map[string]string{"Authorization": ref}},
			}}}
		},
		Decisions: func(n int) any { return ring.Last(n) },
	}
	f := start(t, o)
	for _, path := range []string{"/v1/config", "/v1/decisions"} {
		r := f.do(t, "GET", path, "")
		if r.status != 200 {
			t.Fatalf("%s: %d", path, r.status)
		}
		if !strings.Contains(r.body, `"`+ref+`"`) {
			t.Errorf("%s: body %q does not hold %q verbatim", path, r.body, ref)
		}
	}
}

// TestDecisionsRedacted: the encoded answer of /v1/decisions passes
// Redact; its Content-Length is the redacted body's.
func TestDecisionsRedacted(t *testing.T) {
	const secret = "adm-canary-91c3f0e2"
	ring := admin.NewRing[map[string]string](10)
	ring.Add(map[string]string{"reason": "the upstream echoed " + secret})
	o := admin.Options{
		Decisions: func(n int) any { return ring.Last(n) },
		Redact:    func(s string) string { return strings.ReplaceAll(s, secret, "[redacted]") },
	}
	r := start(t, o).do(t, "GET", "/v1/decisions", "")
	if r.status != 200 || strings.Contains(r.body, secret) || !strings.Contains(r.body, "echoed [redacted]") {
		t.Fatalf("%d: the answer was not redacted", r.status)
	}
	var got []map[string]string
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || len(got) != 1 {
		t.Fatalf("redacted answer is not the JSON list: %v", err)
	}
}

func TestRequestLog(t *testing.T) {
	o := fullOptions()
	o.Token = testToken
	f := start(t, o)
	auth := "Bearer " + testToken

	f.do(t, "GET", "/healthz", "")
	f.do(t, "GET", "/v1/config", auth)
	f.do(t, "GET", "/v1/config", "Bearer "+wrongTok)
	f.do(t, "POST", "/v1/reload", auth)
	f.do(t, "GET", "/v1/decisions?limit=3", auth)
	f.do(t, "GET", "/missing", auth)

	lines := f.log.Lines(t)
	want := []struct {
		level, method, path string
		status              float64
	}{
		{"debug", "GET", "/healthz", 200},
		{"info", "GET", "/v1/config", 200},
		{"info", "GET", "/v1/config", 401},
		{"info", "POST", "/v1/reload", 200},
		{"info", "GET", "/v1/decisions", 200},
		{"info", "GET", "/missing", 404},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d (one per request):\n%s", len(lines), len(want), f.log.String())
	}
	for i, w := range want {
		l := lines[i]
		if l["level"] != w.level || l["method"] != w.method || l["path"] != w.path || l["status"] != w.status {
			t.Errorf("line %d = %v, want level=%s %s %s status=%v", i, l, w.level, w.method, w.path, w.status)
		}
		if _, ok := l["duration_ms"].(float64); !ok {
			t.Errorf("line %d has no %s: %v", i, "duration_ms", l)
		}
		if l["message"] != "admin request" {
			t.Errorf("line %d message %v", i, l["message"])
		}
	}
	logs := f.log.String()
	for _, secret := range []string{testToken, wrongTok, "Authorization", "limit=3"} {
		if strings.Contains(logs, secret) {
			t.Errorf("admin log contains %q", secret)
		}
	}
}

func TestPanicRecovered(t *testing.T) {
	o := admin.Options{
		Config:    func() any { panic("boom") },
		Decisions: func(int) any { return func() {} }, // cannot be encoded
	}
	f := start(t, o)

	r := f.do(t, "GET", "/v1/config", "")
	if r.status != 500 {
		t.Fatalf("panic: status %d, want 500", r.status)
	}
	jsonError(t, r)
	logs := f.log.String()
	if !strings.Contains(logs, "admin handler panicked") || !strings.Contains(logs, "boom") {
		t.Errorf("panic not logged:\n%s", logs)
	}
	if !strings.Contains(logs, `"status":500`) {
		t.Errorf("request line does not record the 500:\n%s", logs)
	}

	r = f.do(t, "GET", "/v1/decisions", "")
	if r.status != 500 || !strings.Contains(jsonError(t, r), "encode response") {
		t.Errorf("unencodable value: %d %q, want a JSON 500", r.status, r.body)
	}

	if r := f.do(t, "GET", "/healthz", ""); r.status != 200 {
		t.Errorf("server unhealthy after a panic: %d", r.status)
	}
}

func ExampleNew() {
	ring := admin.NewRing[string](1000)
	h := admin.New(admin.Options{
		Token:     "from admin.token_file",
		Ready:     func() error { return nil },
		Decisions: func(n int) any { return ring.Last(n) },
	})
	srv := &http.Server{
		Addr:              "127.0.0.1:9090",
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	fmt.Println(srv.Addr)
	// Output: 127.0.0.1:9090
}
