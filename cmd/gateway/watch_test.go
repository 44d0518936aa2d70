package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/kubeletvolume"
)

// watchEnv: a TLS upstream that records the Authorization header of every
// request (and echoes nothing), the gateway's CA, and a config in one
// volume referencing a token in another.
type watchEnv struct {
	tlsUpstreamEnv
	cfg, sec *kubeletvolume.Volume

	mu   sync.Mutex
	seen []string // Authorization, per request, in order
}

func newWatchEnv(t *testing.T) *watchEnv {
	t.Helper()
	e := &watchEnv{cfg: &kubeletvolume.Volume{Dir: t.TempDir()}, sec: &kubeletvolume.Volume{Dir: t.TempDir()}}
	e.tlsUpstreamEnv = newTLSUpstreamEnv(t, []string{"inject.example.com"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, r.Header.Get("Authorization"))
		e.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	return e
}

// config is the gateway config: inject.example.com gets the token file.
func (e *watchEnv) config() string {
	return fmt.Sprintf(`network:
  allowlist:
    - domain: inject.example.com
      transform: {Authorization: "Bearer ${file:%s}"}
  dns: {servers: [%q]}
upstream: {ca_file: %q}
ca: {cert_file: %q, key_file: %q}
limits: {shutdown_grace: 3s}
`, filepath.Join(e.sec.Dir, "token"), e.dnsAddr, e.upCA, filepath.Join(e.caDir, "ca.pem"), filepath.Join(e.caDir, "ca-key.pem"))
}

func (e *watchEnv) last() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		return ""
	}
	return e.seen[len(e.seen)-1]
}

// after returns what the upstream saw from the first request carrying
// first on.
func (e *watchEnv) after(first string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, s := range e.seen {
		if s == first {
			return append([]string(nil), e.seen[i:]...)
		}
	}
	return nil
}

// looper sends requests through one kept-alive tunnel until stopped,
// recording failures and how many connections it opened. It is bounded in
// time and in count, both far beyond what a test needs: a test must stop
// it, not outlast it (on a fast machine a few tens of thousands of
// requests take only seconds).
type looper struct {
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	failures []string
	dials    int
	requests int
}

func (e *watchEnv) loop(t *testing.T, sg *servedGateway) *looper {
	proxyURL, _ := url.Parse("http://" + sg.proxyAddr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: e.pool}, MaxConnsPerHost: 1}
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	l := &looper{stop: make(chan struct{}), done: make(chan struct{})}
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			l.mu.Lock()
			l.dials++
			l.mu.Unlock()
		}
	}}
	go func() {
		defer close(l.done)
		defer tr.CloseIdleConnections()
		give := time.Now().Add(2 * time.Minute)
		for i := 0; i < 1_000_000 && time.Now().Before(give); i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", "https://inject.example.com:"+e.port+"/", nil)
			resp, err := c.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
			l.mu.Lock()
			l.requests++
			if err != nil {
				l.failures = append(l.failures, err.Error())
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					l.failures = append(l.failures, resp.Status)
				}
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(l.end)
	return l
}

func (l *looper) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// waitFor polls cond (bounded) and fails with what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchRotation: `serve --watch` with the config and a token in
// Kubernetes-style volumes. While a client loops through one tunnel, the
// token is rotated (once, then several times in a row), a broken config is
// swapped in, and the token file is deleted: no request fails, the new
// token is injected from the request after each swap, a bad swap keeps the
// old config (its error logged with file and line), and the generation
// shows in the metrics and on the decision lines.
func TestWatchRotation(t *testing.T) {
	e := newWatchEnv(t)
	const tok = "watch-canary-7f3e91"
	e.sec.Write(t, map[string]string{"token": tok + "-1\n"})
	e.cfg.Write(t, map[string]string{"gateway.yaml": e.config()})
	cfgFile := filepath.Join(e.cfg.Dir, "gateway.yaml")
	sg := serveInProcess(t, "{}", "--config", cfgFile, "--watch", "--test-allow-upstream", "127.0.0.1:"+e.port)
	l := e.loop(t, sg)
	waitFor(t, "the first token", func() bool { return e.last() == "Bearer "+tok+"-1" })

	// One rotation.
	e.sec.Write(t, map[string]string{"token": tok + "-2\n"})
	waitFor(t, "the rotated token", func() bool { return e.last() == "Bearer "+tok+"-2" })
	sg.waitMetrics(t, "hookgate_config_generation 2")

	// Rapid successive swaps: the last one wins, and once it is seen no
	// earlier token follows it.
	for i := 3; i <= 6; i++ {
		e.sec.Write(t, map[string]string{"token": fmt.Sprintf("%s-%d\n", tok, i)})
	}
	waitFor(t, "the last of rapid swaps", func() bool { return e.last() == "Bearer "+tok+"-6" })

	// A broken config: the old one keeps serving, the error has file:line.
	e.cfg.Write(t, map[string]string{"gateway.yaml": "network:\n  allowlist:\n    - domain: \"https://x.example.com\"\n"})
	waitFor(t, "the failed reload", func() bool { return strings.Contains(sg.logs.String(), "gateway.yaml:3: network.allowlist[0].domain") })
	e.cfg.Write(t, map[string]string{"gateway.yaml": e.config()})

	// A deleted token file: the reload fails, the old token stays.
	waitFor(t, "the config to be good again", func() bool {
		return len(sg.logLines(t, "config reloaded")) >= 3
	})
	e.sec.Write(t, map[string]string{"other": "x\n"})
	waitFor(t, "the reload without the token to fail", func() bool {
		return strings.Contains(sg.logs.String(), "cannot read "+filepath.Join(e.sec.Dir, "token"))
	})
	e.sec.Write(t, map[string]string{"token": tok + "-7\n"})
	waitFor(t, "the restored token", func() bool { return e.last() == "Bearer "+tok+"-7" })
	l.end()

	if len(l.failures) > 0 {
		t.Fatalf("%d of %d requests failed: %v", len(l.failures), l.requests, l.failures[:min(len(l.failures), 5)])
	}
	if l.dials != 1 {
		t.Errorf("the client opened %d connections, want its one tunnel kept", l.dials)
	}
	// Once a token was injected, no earlier one follows (3 to 5 were
	// swapped in a burst and may never have served).
	for _, i := range []int{2, 6, 7} {
		for _, s := range e.after(fmt.Sprintf("Bearer %s-%d", tok, i)) {
			var n int
			if _, err := fmt.Sscanf(strings.TrimPrefix(s, "Bearer "+tok+"-"), "%d", &n); err != nil || n < i {
				t.Fatalf("after token %d the upstream got token %d", i, n)
			}
		}
	}
	failed := sg.waitMetrics(t, `hookgate_reloads_total{result="error"} 2`)
	gens := sg.logLines(t, "config reloaded")
	lastGen := gens[len(gens)-1]["generation"]
	if !strings.Contains(failed, fmt.Sprintf("hookgate_config_generation %v\n", lastGen)) {
		t.Errorf("metrics generation differs from the last reload's %v", lastGen)
	}
	decisions := sg.logLines(t, "decision")
	if d := decisions[len(decisions)-1]; d["generation"] != lastGen {
		t.Errorf("the last decision line names generation %v, want %v", d["generation"], lastGen)
	}
	if strings.Contains(sg.logs.String(), tok) {
		t.Fatal("a token appears in the gateway's log")
	}
}

// TestWatchAndKeepRulesUsage: --watch needs --config, --keep-rules needs
// --redirect.
func TestWatchAndKeepRulesUsage(t *testing.T) {
	for args, want := range map[string]string{"--watch": "--watch needs --config", "--keep-rules": "--keep-rules needs --redirect"} {
		_, stderr, code := runCLI(t, "serve", args)
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("serve %s: exit %d, stderr %q", args, code, stderr)
		}
	}
}
