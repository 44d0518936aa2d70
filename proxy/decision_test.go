package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// records collects what the observer hears of decisions.
type records struct {
	mu   sync.Mutex
	list []Record
}

func (r *records) observer() Observer {
	return Observer{Decision: func(rec Record) {
		r.mu.Lock()
		r.list = append(r.list, rec)
		r.mu.Unlock()
	}}
}

func (r *records) all() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.list...)
}

// readHeader reads a request header block.
func readHeader(br *bufio.Reader) {
	for i := 0; i < 100; i++ {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			return
		}
	}
}

// checkLine asserts the fields of a decision line.
func checkLine(t *testing.T, line map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := line[k]
		if v == nil {
			if ok {
				t.Errorf("decision line has %s = %v, want none\n%v", k, got, line)
			}
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("decision line %s = %v, want %v\n%v", k, got, v, line)
		}
	}
}

// TestUpstreamResetMidBody: an upstream that sends 200 and part of the body
// and then resets the connection leaves a decision line that says so: the
// status the client got, verdict error, an upstream-error code, and the
// observer (metrics) hears the same.
func TestUpstreamResetMidBody(t *testing.T) {
	cut := make(chan struct{}) // the client has the status: reset now
	raw := newRawUpstream(t, nil)
	raw.serve(func(c net.Conn, br *bufio.Reader) {
		readHeader(br)
		// More than the gateway buffers, so the status reaches the client.
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"+strings.Repeat("x", 64<<10))
		select {
		case <-cut:
		case <-time.After(5 * time.Second):
		}
		reset(c)
	})
	up := raw.addr()
	var recs records
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{up}, observer: recs.observer()})
	resp, err := gw.client(t, nil).Get("http://" + up + "/")
	close(cut)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || err == nil {
		t.Fatalf("status %d, body error %v: want 200 and a cut body", resp.StatusCode, err)
	}
	line := gw.logs.waitDecisions(t, 1)[0]
	checkLine(t, line, map[string]any{"verdict": "error", "code": "upstream-error", "status": 200, "level": "warn"})
	if r, _ := line["reason"].(string); !strings.Contains(r, "broke off") {
		t.Errorf("reason %q does not say the body broke off", r)
	}
	if rs := recs.all(); len(rs) != 1 || rs[0].Verdict != VerdictError || rs[0].Code != CodeUpstreamError {
		t.Errorf("observer heard %+v", rs)
	}
}

// TestTunnelUpstreamReset: an upstream that resets an opaque tunnel after
// the ClientHello makes the tunnel's line an error, not an allow.
func TestTunnelUpstreamReset(t *testing.T) {
	raw := newRawUpstream(t, nil)
	raw.serve(func(c net.Conn, br *bufio.Reader) {
		_, _ = br.ReadByte() // the ClientHello has arrived
		reset(c)
	})
	up := raw.addr()
	_, port, _ := net.SplitHostPort(up)
	gw := startGateway(t, gatewayConfig{allow: []string{"reset.test"}, exempt: []string{up},
		names: map[string][]string{"reset.test": {"127.0.0.1"}}})
	c, resp := connect(t, gw, "reset.test:"+port)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if err := tls.Client(c, &tls.Config{ServerName: "reset.test"}).Handshake(); err == nil {
		t.Fatal("handshake through a reset tunnel succeeded")
	}
	c.Close()
	line := gw.logs.waitDecisions(t, 1)[0]
	checkLine(t, line, map[string]any{"mode": "tunnel", "verdict": "error", "code": "upstream-error", "status": 200})
}

// TestTunnelUpstreamUnreachableAlert: a tunnel whose upstream cannot be
// dialled after the 200 ends with a TLS internal_error alert, which does
// not read as a policy block, and the line names the alert.
func TestTunnelUpstreamUnreachableAlert(t *testing.T) {
	port := closedPort(t)
	gw := startGateway(t, gatewayConfig{allow: []string{"gone.test"}, exempt: []string{"127.0.0.1:" + port},
		names: map[string][]string{"gone.test": {"127.0.0.1"}}})
	c, resp := connect(t, gw, "gone.test:"+port)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	err := tls.Client(c, &tls.Config{ServerName: "gone.test"}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("handshake error %v, want the internal_error alert", err)
	}
	line := gw.logs.waitDecisions(t, 1)[0]
	checkLine(t, line, map[string]any{"verdict": "error", "code": "upstream-error", "tls_alert": "internal_error"})
}

// TestPolicyRefusalStaysDeny: the error verdict is for failures only; a
// refusal by the policy is still a deny, and an upstream that cannot be
// reached is an error.
func TestPolicyRefusalStaysDeny(t *testing.T) {
	port := closedPort(t)
	gw := startGateway(t, gatewayConfig{allow: []string{"allowed.test"}, exempt: []string{"127.0.0.1:" + port},
		names: map[string][]string{"allowed.test": {"127.0.0.1"}}})
	c := gw.client(t, nil)
	for _, u := range []string{"http://denied.test/", "http://allowed.test:" + port + "/"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	lines := gw.logs.waitDecisions(t, 2)
	checkLine(t, lines[0], map[string]any{"verdict": "deny", "code": "blocked-by-allowlist", "level": "info"})
	checkLine(t, lines[1], map[string]any{"verdict": "error", "code": "upstream-error", "status": 502, "level": "warn"})
}

// TestHeaderTooLargeIsLogged: a header block over the limit gets net/http's
// 431, and now a decision line and an observer record of its own.
func TestHeaderTooLargeIsLogged(t *testing.T) {
	var recs records
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, observer: recs.observer()})
	big := "GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n"
	if got := gw.raw(t, big); !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Fatalf("answer %.60q, want 431", got)
	}
	line := gw.logs.waitDecisions(t, 1)[0]
	checkLine(t, line, map[string]any{"verdict": "error", "code": "client-header-too-large", "status": 431, "mode": "http"})
	if rs := recs.all(); len(rs) != 1 || rs[0].Code != CodeClientHeaderTooLarge {
		t.Errorf("observer heard %+v", rs)
	}
}

// TestSlowlorisIsLogged: a client whose header does not arrive within the
// header timeout is cut off, and the cut is logged once, as a client-side
// error.
func TestSlowlorisIsLogged(t *testing.T) {
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, timeouts: Timeouts{ReadHeader: 300 * time.Millisecond}})
	for _, partial := range []string{"GET http://example.test/ HTTP/1.1\r\nHost: exa", ""} {
		c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, partial); err != nil {
			t.Fatal(err)
		}
		// The gateway closes the connection; a read timeout here would
		// mean it kept it.
		_, err = io.ReadAll(c)
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the gateway kept a slow client's connection open")
		}
	}
	lines := gw.logs.waitDecisions(t, 2)
	for _, line := range lines {
		checkLine(t, line, map[string]any{"verdict": "error", "code": "client-timeout", "status": nil})
	}
}

// TestActiveConnectionsObserved: the observer hears of every client
// connection accepted and closed, so the gauge goes up and back down.
func TestActiveConnectionsObserved(t *testing.T) {
	var open atomic.Int64
	gw := startGateway(t, gatewayConfig{allow: []string{"*"},
		observer: Observer{Connection: func(delta int) { open.Add(int64(delta)) }}})
	waitFor := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for open.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("open connections %d, want %d", open.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	waitFor(3)
	for _, c := range conns {
		c.Close()
	}
	waitFor(0)
}

// tunnelsGauge follows the observer's tunnel count; a tunnel's line is
// written before its -1, so a count back at 0 means every line is out.
type tunnelsGauge struct{ open atomic.Int64 }

func (g *tunnelsGauge) observe(o *Observer) {
	o.Tunnel = func(delta int) { g.open.Add(int64(delta)) }
}

func (g *tunnelsGauge) waitClosed(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for g.open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels still open", g.open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMITMUpstreamResetMidBody: inside an intercepted tunnel, a response
// that breaks off is the request's one line, an error with the status the
// client got; the tunnel adds none.
func TestMITMUpstreamResetMidBody(t *testing.T) {
	var tunnels tunnelsGauge
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		conn, bufrw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		_, _ = bufrw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("x", 64<<10))
		_ = bufrw.Flush()
		reset(conn.(*tls.Conn).NetConn())
	}, func(gc *gatewayConfig) { tunnels.observe(&gc.observer) })
	c := env.client(t)
	// The client sees the status and a cut body, or, when the reset came
	// before the gateway flushed the status, a broken response.
	if resp, err := c.Get(env.url("telemetry.example.com", "/cut")); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("status %d and a whole body from an upstream that reset", resp.StatusCode)
		}
	}
	c.CloseIdleConnections()
	tunnels.waitClosed(t)
	lines := env.gw.logs.waitDecisions(t, 1)
	checkLine(t, lines[0], map[string]any{"mode": "mitm", "verdict": "error", "code": "upstream-error", "status": 200})
	env.assertNoCanary(t)
}

// TestMITMSlowlorisOneLine: a client that opens an intercepted tunnel and
// then stalls in its request header gets one line for it — the timeout,
// with the tunnel's host — not a second one for the tunnel.
func TestMITMSlowlorisOneLine(t *testing.T) {
	var tunnels tunnelsGauge
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) {
		gc.timeouts.ReadHeader = 300 * time.Millisecond
		tunnels.observe(&gc.observer)
	})
	c, resp := connect(t, env.gw, "telemetry.example.com:"+env.upstream)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "telemetry.example.com", RootCAs: env.caPool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: tele"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(tc); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the gateway kept a slow client's tunnel open")
		}
	}
	tunnels.waitClosed(t)
	lines := env.gw.logs.waitDecisions(t, 1)
	checkLine(t, lines[0], map[string]any{"mode": "mitm", "host": "telemetry.example.com", "verdict": "error", "code": "client-timeout"})
}

// TestTransparentSlowlorisOneLine: the same on the transparent listener's
// plain HTTP.
func TestTransparentSlowlorisOneLine(t *testing.T) {
	var tunnels tunnelsGauge
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) {
		gc.timeouts.ReadHeader = 300 * time.Millisecond
		tunnels.observe(&gc.observer)
	})
	addr := transparentGateway(t, env, "127.0.0.1:80")
	c := dialTimeout(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHo"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the gateway kept a slow client's connection open")
		}
	}
	tunnels.waitClosed(t)
	lines := env.gw.logs.waitDecisions(t, 1)
	checkLine(t, lines[0], map[string]any{"mode": "http", "transparent": true, "verdict": "error", "code": "client-timeout"})
}

// TestMITMClientGoneIsClientSide: a client that gives up while the
// upstream is still working is a client-side error, never counted as an
// upstream failure.
func TestMITMClientGoneIsClientSide(t *testing.T) {
	var tunnels tunnelsGauge
	arrived := make(chan struct{}, 1)
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}, func(gc *gatewayConfig) { tunnels.observe(&gc.observer) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
		}
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", env.url("telemetry.example.com", "/wait"), nil)
	c := env.client(t)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the cancelled request got an answer")
	}
	c.CloseIdleConnections()
	tunnels.waitClosed(t)
	lines := env.gw.logs.waitDecisions(t, 1)
	checkLine(t, lines[0], map[string]any{"mode": "mitm", "verdict": "error", "code": "client-closed"})
}

// TestForwardClientGoneIsClientSide: the same for plain HTTP: the gateway
// stops waiting for the upstream when the client goes away, and logs a
// client-side error with no status.
func TestForwardClientGoneIsClientSide(t *testing.T) {
	arrived := make(chan struct{}, 1)
	up := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
		}
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", up.URL+"/wait", nil)
	if resp, err := gw.client(t, nil).Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the cancelled request got an answer")
	}
	line := gw.logs.waitDecisions(t, 1)[0]
	// Had the gateway kept waiting, the upstream's late 200 would make
	// this an allow.
	checkLine(t, line, map[string]any{"mode": "http", "verdict": "error", "code": "client-closed", "status": nil})
}
