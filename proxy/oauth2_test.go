package proxy

import (
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// tokenServer is a local OAuth2 token endpoint that counts its requests and
// hands out "tok-N-do-not-leak" tokens.
type tokenServer struct {
	*upstream
	n         atomic.Int32
	expiresIn atomic.Int32
	status    atomic.Int32  // non-zero: answer with this status
	gate      chan struct{} // token requests wait until it is closed
	arrived   chan struct{} // gets a value when a token request arrives
}

func tokenValue(n int32) string { return fmt.Sprintf("tok-%d-do-not-leak", n) }

func newTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	close(ts.gate)
	ts.expiresIn.Store(3600)
	ts.upstream = newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
		n := ts.n.Add(1)
		select {
		case ts.arrived <- struct{}{}:
		default:
		}
		<-ts.gate
		id, secret, ok := r.BasicAuth()
		_ = r.ParseForm()
		if st := ts.status.Load(); st != 0 {
			w.WriteHeader(int(st))
			_, _ = io.WriteString(w, `{"error":"invalid_client","echo":"`+secret+`"}`)
			return
		}
		if !ok || id != "agent-client" || secret != canary || r.Form.Get("grant_type") != "client_credentials" ||
			r.Form.Get("scope") != "read write" || r.Form.Get("audience") != "https://api.example.com" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tokenValue(n), ts.expiresIn.Load())
	})
	return ts
}

// newOAuth2Env is a gateway whose telemetry.example.com entry gets its
// bearer token from ts, which serves auth.example.com.
func newOAuth2Env(t *testing.T, ts *tokenServer, handler http.HandlerFunc, mutate func(*gatewayConfig)) *mitmEnv {
	t.Helper()
	authority, pool := newCA(t)
	up := newUpstream(t, true, handler)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	roots.AddCert(ts.Certificate())
	rules := compileSpec(t, transform.Spec{OAuth2: &transform.OAuth2Spec{
		TokenURL: "https://auth.example.com:" + ts.port() + "/oauth/token", ClientID: "agent-client",
		ClientSecret: "${env:CANARY}", Scopes: []string{"read", "write"}, Audience: "https://api.example.com"}})
	gc := gatewayConfig{
		allow:  []string{"telemetry.example.com", "auth.example.com"},
		exempt: []string{up.hostPort(), ts.hostPort()},
		names: map[string][]string{
			"telemetry.example.com": {"127.0.0.1"},
			"auth.example.com":      {"127.0.0.1"},
		},
		rootPool: roots,
		entries:  []config.Entry{{Transform: rules}},
		leaves:   ca.NewLeafCache(authority, 16),
	}
	if mutate != nil {
		mutate(&gc)
	}
	return &mitmEnv{gw: startGateway(t, gc), up: up, caPool: pool, upstream: up.port()}
}

// echoBearer answers with the Authorization header the upstream got, in a
// header and the body.
func echoBearer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	fmt.Fprintf(w, "%s|%d", r.Header.Get("Authorization"), len(r.Header.Values("Authorization")))
}

func TestOAuth2TokenCachedAndScrubbed(t *testing.T) {
	ts := newTokenServer(t)
	env := newOAuth2Env(t, ts, echoBearer, nil)
	c := env.client(t)
	for i := 0; i < 3; i++ {
		resp, body := get(t, c, env.url("telemetry.example.com", "/x"), http.Header{"Authorization": {"Bearer sandbox"}})
		if resp.StatusCode != 200 || resp.Header.Get("X-Echo") != "[redacted]" || strings.Contains(body, "tok-") || !strings.HasSuffix(body, "|1") {
			t.Fatalf("request %d: %d, echo %q, body %q", i, resp.StatusCode, resp.Header.Get("X-Echo"), body)
		}
	}
	for i, r := range env.up.requests() {
		if r.Header.Get("Authorization") != "Bearer "+tokenValue(1) {
			t.Fatalf("request %d reached the upstream without the first token", i)
		}
	}
	if n := ts.n.Load(); n != 1 {
		t.Fatalf("the token endpoint was asked %d times, want once (the token is cached)", n)
	}
	ds := env.gw.logs.waitDecisions(t, 3)
	if fmt.Sprint(ds[0]["injected"]) != "[Authorization]" {
		t.Fatalf("decision = %v", ds[0])
	}
	assertAbsent(t, "the log", env.gw.logs.String(), canary, tokenValue(1))
}

func TestOAuth2TokenRefreshedBeforeExpiry(t *testing.T) {
	ts := newTokenServer(t)
	ts.expiresIn.Store(1) // inside the refresh margin: stale at once
	env := newOAuth2Env(t, ts, echoBearer, nil)
	c := env.client(t)
	for i := 0; i < 2; i++ {
		if resp, _ := get(t, c, env.url("telemetry.example.com", "/x"), nil); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	reqs := env.up.requests()
	if ts.n.Load() != 2 || reqs[0].Header.Get("Authorization") != "Bearer "+tokenValue(1) || reqs[1].Header.Get("Authorization") != "Bearer "+tokenValue(2) {
		t.Fatalf("want a new token for each request (%d fetches)", ts.n.Load())
	}
}

func TestOAuth2ConcurrentRequestsOneRefresh(t *testing.T) {
	ts := newTokenServer(t)
	gate := make(chan struct{})
	var release sync.Once
	ts.gate = gate // the first token request waits
	t.Cleanup(func() { release.Do(func() { close(gate) }) })
	env := newOAuth2Env(t, ts, echoBearer, nil)
	c := env.client(t)
	const n = 8
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, env.url("telemetry.example.com", "/x"), nil)
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	select {
	case <-ts.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no token request arrived")
	}
	release.Do(func() { close(gate) })
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Fatalf("request %d: status %d", i, st)
		}
	}
	if got := ts.n.Load(); got != 1 {
		t.Fatalf("the token endpoint was asked %d times for %d concurrent requests, want once", got, n)
	}
}

func TestOAuth2FailureRefusesWithNothingForwarded(t *testing.T) {
	ts := newTokenServer(t)
	env := newOAuth2Env(t, ts, echoBearer, nil)
	c := env.client(t)
	ts.status.Store(http.StatusUnauthorized)
	resp, body := get(t, c, env.url("telemetry.example.com", "/x"), nil)
	if resp.StatusCode != 502 || resp.Header.Get(HeaderProxyError) != string(CodeUpstreamCredential) || !strings.Contains(body, "answered 401") {
		t.Fatalf("token endpoint 401: got %d %q", resp.StatusCode, hideCanary(body))
	}
	ts.Close() // down
	resp, body = get(t, c, env.url("telemetry.example.com", "/x"), nil)
	if resp.StatusCode != 502 || resp.Header.Get(HeaderProxyError) != string(CodeUpstreamCredential) {
		t.Fatalf("token endpoint down: got %d %q", resp.StatusCode, hideCanary(body))
	}
	if n := len(env.up.requests()); n != 0 {
		t.Fatalf("%d requests were forwarded without a token", n)
	}
	env.gw.logs.waitDecisions(t, 2)
	assertAbsent(t, "the answers and the log", body+env.gw.logs.String(), canary)
}

// TestOAuth2TokenHostJudgedByPolicy: a token endpoint off the allowlist is
// never dialled; the request is refused.
func TestOAuth2TokenHostJudgedByPolicy(t *testing.T) {
	ts := newTokenServer(t)
	env := newOAuth2Env(t, ts, echoBearer, func(gc *gatewayConfig) {
		gc.allow = []string{"telemetry.example.com"}
	})
	resp, body := get(t, env.client(t), env.url("telemetry.example.com", "/x"), nil)
	if resp.StatusCode != 502 || resp.Header.Get(HeaderProxyError) != string(CodeUpstreamCredential) || ts.n.Load() != 0 {
		t.Fatalf("got %d %q, token endpoint asked %d times", resp.StatusCode, hideCanary(body), ts.n.Load())
	}
}
