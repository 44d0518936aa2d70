package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
)

// The timeouts of these tests: a short response-header timeout that the
// slow upstream always outlasts, and a long one it never does.
const (
	shortTimeout = 200 * time.Millisecond
	longTimeout  = 5 * time.Second
)

// gatedUpstream answers each request only when the test releases its path
// (or when the gateway gives up on it), so that "slow" is an order of
// events, not a duration.
type gatedUpstream struct {
	arrived chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
}

func newGatedUpstream() *gatedUpstream {
	return &gatedUpstream{arrived: make(chan string, 16), gates: map[string]chan struct{}{}}
}

func (g *gatedUpstream) gate(path string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[path] == nil {
		g.gates[path] = make(chan struct{})
	}
	return g.gates[path]
}

func (g *gatedUpstream) release(path string) { close(g.gate(path)) }

func (g *gatedUpstream) serve(w http.ResponseWriter, r *http.Request) {
	g.arrived <- r.URL.Path
	select {
	case <-g.gate(r.URL.Path):
		_, _ = io.WriteString(w, "answered "+r.URL.Path)
	case <-r.Context().Done(): // the gateway gave up
	}
}

// waitArrived waits (bounded) until the upstream holds a request for path.
func (g *gatedUpstream) waitArrived(t *testing.T, path string) {
	t.Helper()
	select {
	case p := <-g.arrived:
		if p != path {
			t.Fatalf("upstream got %s, want %s", p, path)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the request for %s never reached the upstream", path)
	}
}

type result struct {
	resp *http.Response
	err  error
}

// checkSlowAnswers: the patient request reaches the upstream first; the
// quick one, sent after it, times out (504); only then is the patient one
// answered — later than the short timeout would have allowed — and gets
// its 200.
func checkSlowAnswers(t *testing.T, c *http.Client, up *gatedUpstream, patientURL, quickURL string) {
	t.Helper()
	patient := make(chan result, 1)
	go func() {
		resp, err := c.Get(patientURL)
		patient <- result{resp, err}
	}()
	up.waitArrived(t, "/patient")

	resp, err := c.Get(quickURL)
	if err != nil {
		t.Fatal(err)
	}
	denialOf(t, resp, http.StatusGatewayTimeout, CodeUpstreamTimeout)
	up.waitArrived(t, "/quick")

	up.release("/patient")
	r := <-patient
	if r.err != nil {
		t.Fatalf("the entry with the longer timeout: %v", r.err)
	}
	body, _ := io.ReadAll(r.resp.Body)
	r.resp.Body.Close()
	if r.resp.StatusCode != http.StatusOK || string(body) != "answered /patient" {
		t.Fatalf("the entry with the longer timeout: %d %q, want 200", r.resp.StatusCode, body)
	}
}

// TestResponseHeaderTimeoutFromReload: a reload brings a short
// response-header timeout for new requests, and an entry keeps a longer one.
func TestResponseHeaderTimeoutFromReload(t *testing.T) {
	up := newGatedUpstream()
	origin := newUpstream(t, false, up.serve)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"quick.test", "patient.test"},
		exempt: []string{origin.hostPort()},
		names:  map[string][]string{"quick.test": {"127.0.0.1"}, "patient.test": {"127.0.0.1"}},
	})
	p := *gw.srv.Policy()
	p.Timeouts = config.Timeouts{ResponseHeader: shortTimeout}
	p.Entries = []config.Entry{{}, {ResponseHeaderTimeout: longTimeout}}
	if err := gw.srv.SetPolicy(&p); err != nil {
		t.Fatal(err)
	}
	c := gw.client(t, nil)
	checkSlowAnswers(t, c, up, "http://patient.test:"+origin.port()+"/patient", "http://quick.test:"+origin.port()+"/quick")
	gw.logs.waitDecisions(t, 2)
}

// TestResponseHeaderTimeoutPerEntryMITM: the same inside intercepted
// tunnels, with the short timeout from the server's options.
func TestResponseHeaderTimeoutPerEntryMITM(t *testing.T) {
	up := newGatedUpstream()
	env := newMITMEnv(t, up.serve, func(gc *gatewayConfig) {
		gc.allow = []string{"telemetry.example.com", "llm.example.com"}
		gc.names["llm.example.com"] = []string{"127.0.0.1"}
		rules := compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"})
		gc.entries = []config.Entry{{Transform: rules}, {Transform: rules, ResponseHeaderTimeout: longTimeout}}
		gc.timeouts = Timeouts{ResponseHeader: shortTimeout}
	})
	checkSlowAnswers(t, env.client(t), up, env.url("llm.example.com", "/patient"), env.url("telemetry.example.com", "/quick"))
	env.assertNoCanary(t)
}

// TestTunnelIdleFromReload: an opaque tunnel opened after a reload that
// shortens tunnel_idle is closed by the gateway once idle that long.
func TestTunnelIdleFromReload(t *testing.T) {
	origin := newUpstream(t, true, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"example.com"},
		exempt: []string{origin.hostPort()},
		names:  map[string][]string{"example.com": {"127.0.0.1"}},
	})
	p := *gw.srv.Policy()
	p.Timeouts = config.Timeouts{TunnelIdle: shortTimeout}
	if err := gw.srv.SetPolicy(&p); err != nil {
		t.Fatal(err)
	}
	c, resp := connect(t, gw, "example.com:"+origin.port())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	cfg := origin.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "example.com"
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// Nothing more is sent; the gateway must end the tunnel long before
	// connect's 5s deadline on the client side (a default tunnel_idle
	// would keep it for 10 minutes).
	_ = c.SetDeadline(time.Now().Add(longTimeout))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle tunnel")
	} else if isTimeout(err) {
		t.Fatalf("the idle tunnel was not closed by the gateway: %v", err)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["mode"] != "tunnel" || d["verdict"] != "allow" {
		t.Fatalf("decision = %v", d)
	}
}

func TestTransportSet(t *testing.T) {
	base := &http.Transport{TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: time.Minute}
	ts := transportSet{base: base}
	if got := ts.get(Timeouts{TLSHandshake: 10 * time.Second, ResponseHeader: time.Minute, Dial: time.Second}, ""); got != base {
		t.Error("the server's own timeouts must use the base transport")
	}
	slow := ts.get(Timeouts{TLSHandshake: 10 * time.Second, ResponseHeader: 10 * time.Minute}, "")
	if slow == base || slow.ResponseHeaderTimeout != 10*time.Minute || slow.TLSHandshakeTimeout != 10*time.Second {
		t.Fatalf("clone has %v/%v", slow.TLSHandshakeTimeout, slow.ResponseHeaderTimeout)
	}
	if again := ts.get(Timeouts{TLSHandshake: 10 * time.Second, ResponseHeader: 10 * time.Minute}, ""); again != slow {
		t.Error("the same timeouts must share one transport (and its pool)")
	}
	ts.reset()
	if fresh := ts.get(Timeouts{TLSHandshake: 10 * time.Second, ResponseHeader: 10 * time.Minute}, ""); fresh == slow {
		t.Error("reset must forget the clones (their connections were judged under the old policy)")
	}
}

// expectContinue sends every request with "Expect: 100-continue", which
// takes the forwarding path's http.Transport instead of the client
// connection's own upstream connection.
type expectContinue struct{ http.RoundTripper }

func (e expectContinue) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Expect", "100-continue")
	return e.RoundTripper.RoundTrip(r)
}

// TestResponseHeaderTimeoutPerEntryTransport: the same on the forwarding
// path that goes through an http.Transport (whose timeouts are fixed per
// transport).
func TestResponseHeaderTimeoutPerEntryTransport(t *testing.T) {
	up := newGatedUpstream()
	origin := newUpstream(t, false, up.serve)
	gw := startGateway(t, gatewayConfig{
		allow:    []string{"quick.test", "patient.test"},
		exempt:   []string{origin.hostPort()},
		names:    map[string][]string{"quick.test": {"127.0.0.1"}, "patient.test": {"127.0.0.1"}},
		entries:  []config.Entry{{}, {ResponseHeaderTimeout: longTimeout}},
		timeouts: Timeouts{ResponseHeader: shortTimeout},
	})
	c := gw.client(t, nil)
	c.Transport = expectContinue{c.Transport}
	checkSlowAnswers(t, c, up, "http://patient.test:"+origin.port()+"/patient", "http://quick.test:"+origin.port()+"/quick")
}

// TestTLSHandshakeTimeoutFromReload: an intercepted host whose upstream
// accepts TCP but never answers the TLS handshake gets 504 after the
// policy's tls_handshake, long before the default (10s) — and before the
// client's own 5s timeout.
func TestTLSHandshakeTimeoutFromReload(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		held []net.Conn // never a byte back
	)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	env := newMITMEnv(t, nil, func(gc *gatewayConfig) {
		gc.exempt = append(gc.exempt, silent.Addr().String())
	})
	p := *env.gw.srv.Policy()
	p.Timeouts = config.Timeouts{TLSHandshake: shortTimeout}
	if err := env.gw.srv.SetPolicy(&p); err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	c.Timeout = longTimeout
	_, port, _ := net.SplitHostPort(silent.Addr().String())
	resp, err := c.Get("https://telemetry.example.com:" + port + "/")
	if err != nil {
		t.Fatalf("no answer from the gateway: %v", err)
	}
	denialOf(t, resp, http.StatusGatewayTimeout, CodeUpstreamTimeout)
	env.assertNoCanary(t)
}
