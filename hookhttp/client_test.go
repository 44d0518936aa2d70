package hookhttp

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func tlsServer(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, ca
}

func newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	if opts.RetryWaitMin == 0 {
		opts.RetryWaitMin, opts.RetryWaitMax = 5*time.Millisecond, 20*time.Millisecond
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func post(t *testing.T, c *Client, url string, timeout time.Duration) (*Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Post(ctx, url, map[string]string{"X-Event-Source": "test"}, "key-1", []byte(`{"tool_call":{"name":"x"}}`), timeout)
}

func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

func TestPostHeadersAndBody(t *testing.T) {
	var got *http.Request
	var body []byte
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r, mustRead(r.Body)
		w.Write([]byte(`{"decision":"allow"}`))
	}))
	c := newClient(t, Options{CAFile: ca, Version: "v1.2.3"})
	resp, err := post(t, c, srv.URL+"/hook", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != `{"decision":"allow"}` || resp.Attempts != 1 {
		t.Errorf("resp = %+v", resp)
	}
	if got.Method != "POST" || got.URL.Path != "/hook" || got.Header.Get("Content-Type") != "application/json" ||
		got.Header.Get("User-Agent") != "hookgate/v1.2.3" || got.Header.Get("Idempotency-Key") != "key-1" ||
		got.Header.Get("X-Event-Source") != "test" || string(body) != `{"tool_call":{"name":"x"}}` {
		t.Errorf("request = %s %s %v %s", got.Method, got.URL, got.Header, body)
	}
}

func mustRead(r io.Reader) []byte { b, _ := io.ReadAll(r); return b }

func TestUntrustedCertificate(t *testing.T) {
	srv, _ := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := newClient(t, Options{}) // system roots only
	_, err := post(t, c, srv.URL, 5*time.Second)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindConnect || e.Attempts != 1 || !strings.Contains(e.Detail, "certificate") {
		t.Fatalf("err = %v (%+v)", err, e)
	}
}

func TestRetryKeepsIdempotencyKey(t *testing.T) {
	var n atomic.Int32
	var mu sync.Mutex
	var keys []string
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key")+"|"+string(mustRead(r.Body)))
		mu.Unlock()
		switch n.Add(1) {
		case 1:
			w.WriteHeader(http.StatusBadGateway)
		case 2:
			// Drop the connection without an answer: a connection error.
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
		default:
			w.Write([]byte(`{"decision":"deny","reason":"third time"}`))
		}
	}))
	c := newClient(t, Options{CAFile: ca})
	resp, err := post(t, c, srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The dropped connection may be replayed by net/http itself (a POST
	// with an Idempotency-Key on a reused connection that died before any
	// answer) rather than by our retry loop: either way, same key and body.
	if resp.Attempts < 2 || resp.Attempts > 3 || len(keys) != 3 {
		t.Fatalf("attempts = %d, server saw %d", resp.Attempts, len(keys))
	}
	for _, k := range keys {
		if k != keys[0] || !strings.HasPrefix(k, "key-1|{") {
			t.Errorf("attempts differ: %q", keys)
		}
	}
}

func TestRetriesAtMostTwiceAndOnlyOnGatewayErrors(t *testing.T) {
	for _, tc := range []struct {
		status   int
		attempts int32
	}{{502, 3}, {503, 3}, {504, 3}, {500, 1}, {429, 1}, {404, 1}, {302, 1}} {
		var n atomic.Int32
		srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			if tc.status == 302 {
				http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
				return
			}
			w.WriteHeader(tc.status)
		}))
		c := newClient(t, Options{CAFile: ca})
		_, err := post(t, c, srv.URL, 5*time.Second)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindStatus || e.Status != tc.status || n.Load() != tc.attempts {
			t.Errorf("status %d: err %v, server saw %d attempts, want %d", tc.status, err, n.Load(), tc.attempts)
		}
		if tc.status == 302 && !strings.Contains(e.Detail, "redirect not followed") {
			t.Errorf("redirect detail = %q", e.Detail)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Run("beyond the deadline: no wait, the status is the answer", func(t *testing.T) {
		var n atomic.Int32
		srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		c := newClient(t, Options{CAFile: ca})
		start := time.Now()
		_, err := post(t, c, srv.URL, 2*time.Second)
		if kindOf(err) != KindStatus || n.Load() != 1 || time.Since(start) > time.Second {
			t.Fatalf("err %v after %v, %d attempts", err, time.Since(start), n.Load())
		}
	})
	t.Run("inside the deadline: honoured", func(t *testing.T) {
		var n atomic.Int32
		var first time.Time
		var waited time.Duration
		srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				first = time.Now()
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			waited = time.Since(first)
			w.Write([]byte(`{}`))
		}))
		c := newClient(t, Options{CAFile: ca})
		if _, err := post(t, c, srv.URL, 5*time.Second); err != nil || waited < 900*time.Millisecond {
			t.Fatalf("err %v, waited %v", err, waited)
		}
	})
}

func TestConnectionRefusedRetriedThenConnectError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, Options{})
	_, err = post(t, c, "https://"+addr+"/", 5*time.Second)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindConnect || e.Attempts != 3 || !strings.Contains(e.Detail, "refused") {
		t.Fatalf("err = %v (%+v)", err, e)
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	c := newClient(t, Options{CAFile: ca})
	start := time.Now()
	_, err := post(t, c, srv.URL, 200*time.Millisecond)
	if kindOf(err) != KindTimeout || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestBodyCap(t *testing.T) {
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat(" ", 2000)))
	}))
	c := newClient(t, Options{CAFile: ca, MaxBody: 1000})
	_, err := post(t, c, srv.URL, 5*time.Second)
	if kindOf(err) != KindBadResponse {
		t.Fatalf("err = %v", err)
	}
}

// proxyName is the name the test proxy answers for loopback, without DNS:
// httptest's certificate is valid for it.
const proxyName = "example.com"

// loopbackTarget is where the test proxy dials for a CONNECT to hostPort:
// a loopback address as it is, proxyName as 127.0.0.1, nothing else. It
// never resolves a name, so tests send traffic to loopback only.
func loopbackTarget(hostPort string) (string, bool) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "", false
	}
	if host == proxyName {
		return net.JoinHostPort("127.0.0.1", port), true
	}
	ip, err := netip.ParseAddr(host)
	return hostPort, err == nil && ip.IsLoopback()
}

// connectProxy is a minimal CONNECT proxy that counts tunnels, standing in
// for the gateway's explicit listener.
func connectProxy(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var tunnels atomic.Int32
	var mu sync.Mutex
	var done []chan struct{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		target, ok := loopbackTarget(r.Host)
		if !ok {
			http.Error(w, "the test proxy reaches loopback only", http.StatusBadGateway)
			return
		}
		up, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		tunnels.Add(1)
		w.WriteHeader(http.StatusOK)
		conn, _, _ := w.(http.Hijacker).Hijack()
		d1, d2 := make(chan struct{}), make(chan struct{})
		mu.Lock()
		done = append(done, d1, d2)
		mu.Unlock()
		go func() { defer close(d1); io.Copy(up, conn); up.Close() }()
		go func() { defer close(d2); io.Copy(conn, up); conn.Close() }()
	}))
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, d := range done {
			select {
			case <-d:
			case <-time.After(5 * time.Second):
				t.Error("proxy tunnel did not end")
			}
		}
	})
	return srv, &tunnels
}

func TestThroughProxy(t *testing.T) {
	target, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"decision":"allow"}`))
	}))
	t.Run("explicit proxy URL", func(t *testing.T) {
		proxy, tunnels := connectProxy(t)
		c := newClient(t, Options{CAFile: ca, Proxy: proxy.URL})
		if _, err := post(t, c, target.URL, 5*time.Second); err != nil || tunnels.Load() < 1 {
			t.Fatalf("err %v, tunnels %d", err, tunnels.Load())
		}
		c.Close()
	})
	t.Run("HTTPS_PROXY", func(t *testing.T) {
		proxy, tunnels := connectProxy(t)
		env := map[string]string{"HTTPS_PROXY": proxy.URL}
		c := newClient(t, Options{CAFile: ca, Getenv: func(k string) string { return env[k] }})
		// Go's environment proxy rules never proxy loopback; reach the
		// target by a name, which only the proxy maps to loopback.
		u := strings.Replace(target.URL, "127.0.0.1", proxyName, 1)
		if _, err := post(t, c, u, 5*time.Second); err != nil || tunnels.Load() < 1 {
			t.Fatalf("err %v, tunnels %d", err, tunnels.Load())
		}
		c.Close()
	})
}

func TestNewErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not pem"), 0o644)
	for _, o := range []Options{{CAFile: bad}, {CAFile: "/nonexistent.pem"}, {Proxy: "ftp://x:1"}} {
		o.Getenv = func(string) string { return "" }
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}
