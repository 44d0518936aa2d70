package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"
)

// testParkAfter is the park threshold of these tests: short, so that
// they need not wait, and long enough that a direction moving bytes does
// not park between two of them.
const testParkAfter = 50 * time.Millisecond

// parkedDirections counts the tunnel directions parked right now.
func (s *Server) parkedDirections() int {
	s.parking.Lock()
	p := s.parking.p
	s.parking.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// waitParked waits (bounded) until exactly n directions are parked.
func waitParked(tb testing.TB, s *Server, n int) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.parkedDirections() != n; {
		if time.Now().After(deadline) {
			tb.Fatalf("%d directions parked, want %d", s.parkedDirections(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// parkGateway starts a gateway whose tunnels park after testParkAfter,
// and an upstream listener it may reach as example.com.
func parkGateway(t *testing.T, timeouts Timeouts) (*gateway, net.Listener, []byte, string) {
	t.Helper()
	return tunnelGateway(t, gatewayConfig{timeouts: timeouts, parkAfter: testParkAfter})
}

// tunnelGateway starts a gateway with gc that allows example.com, and an
// upstream listener it reaches under that name; it returns them with a
// ClientHello for example.com and the CONNECT target ("example.com:port").
func tunnelGateway(tb testing.TB, gc gatewayConfig) (*gateway, net.Listener, []byte, string) {
	tb.Helper()
	hello := recordedClientHello(tb, "example.com")
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { up.Close() })
	gc.allow = []string{"example.com"}
	gc.exempt = []string{up.Addr().String()}
	gc.names = map[string][]string{"example.com": {"127.0.0.1"}}
	gw := startGateway(tb, gc)
	_, port, _ := net.SplitHostPort(up.Addr().String())
	return gw, up, hello, "example.com:" + port
}

// openParked opens a tunnel, moves the exchange through it and waits until
// both its directions are parked (with want directions parked in all).
func openParked(t *testing.T, gw *gateway, up net.Listener, hello []byte, target string, want int) *idleExchange {
	t.Helper()
	ex := &idleExchange{up: up, hello: hello}
	t.Cleanup(ex.close) // before the gateway's Shutdown, which waits for its tunnels
	if err := ex.openThrough(gw.addr, target); err != nil {
		t.Fatal(err)
	}
	if err := ex.exchange(); err != nil {
		t.Fatal(err)
	}
	waitParked(t, gw.srv, want)
	return ex
}

// sendThrough writes p on from and reads it back whole on to.
func sendThrough(t *testing.T, from, to net.Conn, p []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { _, err := from.Write(p); errc <- err }()
	got := make([]byte, len(p))
	if _, err := io.ReadFull(to, got); err != nil {
		t.Fatalf("reading %d bytes: %v", len(p), err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, p) {
		t.Fatal("the bytes arrived changed")
	}
}

// TestParkedTunnelWakesOnData: bytes sent into a parked tunnel, either
// way, arrive whole and in order, and the tunnel parks again after them;
// the decision line counts every byte.
func TestParkedTunnelWakesOnData(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{})
	ex := openParked(t, gw, up, hello, target, 2)
	rng := rand.New(rand.NewPCG(1, 2))
	in, out := int64(len(hello)+100), int64(1024)
	for range 3 {
		answer := make([]byte, 200<<10)
		for i := range answer {
			answer[i] = byte(rng.Uint32())
		}
		sendThrough(t, ex.upstream, ex.client, answer)
		sendThrough(t, ex.client, ex.upstream, answer[:777])
		in, out = in+777, out+int64(len(answer))
		waitParked(t, gw.srv, 2)
	}
	ex.close()
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["verdict"] != "allow" || d["bytes_in"] != float64(in) || d["bytes_out"] != float64(out) {
		t.Fatalf("decision = %v, want bytes_in %d and bytes_out %d", d, in, out)
	}
}

// TestParkedTunnelWakesOnFIN: a FIN reaching a parked direction is relayed
// (half-close), the other direction still carries bytes, and the tunnel
// ends when both sides have closed.
func TestParkedTunnelWakesOnFIN(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{})
	ex := openParked(t, gw, up, hello, target, 2)
	if err := ex.client.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(ex.upstream); err != nil || len(got) != 0 {
		t.Fatalf("upstream read %q to %v, want EOF", got, err)
	}
	waitParked(t, gw.srv, 1)
	if _, err := ex.upstream.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	if err := ex.upstream.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(ex.client); err != nil || string(got) != "answer" {
		t.Fatalf("client read %q to %v, want the answer to EOF", got, err)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["verdict"] != "allow" || d["bytes_out"] != float64(1024+len("answer")) {
		t.Fatalf("decision = %v", d)
	}
	waitParked(t, gw.srv, 0)
}

// TestParkedTunnelWakesOnReset: an upstream's reset wakes its parked
// direction, which ends and passes the end on as a FIN; the client's
// close then ends the tunnel, which is not called broken (bytes had
// moved).
func TestParkedTunnelWakesOnReset(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{})
	ex := openParked(t, gw, up, hello, target, 2)
	if err := ex.upstream.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	ex.upstream.Close()
	if got, err := io.ReadAll(ex.client); err != nil || len(got) != 0 {
		t.Fatalf("client read %q to %v, want EOF", got, err)
	}
	ex.client.Close()
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["verdict"] != "allow" || d["bytes_out"] != float64(1024) {
		t.Fatalf("decision = %v", d)
	}
	waitParked(t, gw.srv, 0)
}

// TestParkedTunnelIdleTimeout: a parked tunnel still ends at its idle
// deadline, with one decision line, and the client sees it closed.
func TestParkedTunnelIdleTimeout(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{TunnelIdle: 400 * time.Millisecond})
	ex := openParked(t, gw, up, hello, target, 2)
	if got, err := io.ReadAll(ex.client); err != nil || len(got) != 0 {
		t.Fatalf("client read %q to %v, want EOF at the idle deadline", got, err)
	}
	if got, err := io.ReadAll(ex.upstream); err != nil || len(got) != 0 {
		t.Fatalf("upstream read %q to %v, want EOF at the idle deadline", got, err)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["verdict"] != "allow" || d["bytes_out"] != float64(1024) || d["bytes_in"] != float64(len(hello)+100) {
		t.Fatalf("decision = %v", d)
	}
	waitParked(t, gw.srv, 0)
}

// TestParkedTunnelsEndInDeadlineOrder: parked tunnels end at their own
// idle deadlines, kept in one heap by the parker: each ends, none before
// its time, and a wake that moves a tunnel's deadline moves its place.
// Tunnel a, opened first, moves a byte each way after b and c are parked,
// so its deadlines pass theirs: they end b, c, a.
func TestParkedTunnelsEndInDeadlineOrder(t *testing.T) {
	const idle = 800 * time.Millisecond
	gw, up, hello, target := parkGateway(t, Timeouts{TunnelIdle: idle})
	names := []string{"a", "b", "c"}
	held := map[string]*idleExchange{}
	for i, name := range names {
		held[name] = openParked(t, gw, up, hello, target, 2*(i+1))
		time.Sleep(150 * time.Millisecond) // apart by more than the timers' jitter
	}
	// Each direction ends at its own deadline: wake both of a's.
	sendThrough(t, held["a"].client, held["a"].upstream, []byte("x"))
	sendThrough(t, held["a"].upstream, held["a"].client, []byte("y"))
	waitParked(t, gw.srv, 6)

	ended := make(chan string, len(names))
	for _, name := range names {
		go func() {
			_, _ = io.ReadAll(held[name].client) // EOF at the idle deadline
			ended <- name
		}()
	}
	var order []string
	for range names {
		select {
		case name := <-ended:
			order = append(order, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("tunnels ended so far: %v; the others were never ended", order)
		}
	}
	if fmt.Sprint(order) != "[b c a]" {
		t.Fatalf("tunnels ended in the order %v, want [b c a]", order)
	}
	gw.logs.waitDecisions(t, len(names))
	waitParked(t, gw.srv, 0)
}

// TestParkedTunnelClientClose: the client closing while its direction is
// parked ends the tunnel: the upstream sees the FIN, and its close ends
// the other direction, parked too.
func TestParkedTunnelClientClose(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{})
	ex := openParked(t, gw, up, hello, target, 2)
	ex.client.Close()
	if got, err := io.ReadAll(ex.upstream); err != nil || len(got) != 0 {
		t.Fatalf("upstream read %q to %v, want EOF", got, err)
	}
	ex.upstream.Close()
	gw.logs.waitDecisions(t, 1)
	waitParked(t, gw.srv, 0)
}

// TestShutdownEndsParkedTunnels: Shutdown gives up waiting for parked
// tunnels at its deadline and ends them: both ends see them closed, and
// each has its decision line. The upstreams here never close on their
// own.
func TestShutdownEndsParkedTunnels(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{})
	const n = 5
	var held []*idleExchange
	for i := range n {
		held = append(held, openParked(t, gw, up, hello, target, 2*(i+1)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- gw.srv.Shutdown(ctx) }()
	select {
	case err := <-shut:
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return with parked tunnels")
	}
	for _, ex := range held {
		for _, c := range []net.Conn{ex.client, ex.upstream} {
			if _, err := io.ReadAll(c); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				t.Fatalf("read after shutdown: %v, want the tunnel closed", err)
			}
		}
	}
	gw.logs.waitDecisions(t, n)
	if got := gw.srv.parkedDirections(); got != 0 {
		t.Fatalf("%d directions parked after shutdown", got)
	}
}

// isReset reports a connection reset by the peer.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// TestManyParkedTunnels: many tunnels park at once, and each wakes to
// carry its own bytes, to its own peer, and parks again.
func TestManyParkedTunnels(t *testing.T) {
	gw, up, hello, target := parkGateway(t, Timeouts{})
	const n = 200
	held := make([]*idleExchange, 0, n)
	for i := range n {
		ex := &idleExchange{up: up, hello: hello}
		t.Cleanup(ex.close)
		if err := ex.openThrough(gw.addr, target); err != nil {
			t.Fatal(err)
		}
		if err := ex.exchange(); err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		held = append(held, ex)
	}
	waitParked(t, gw.srv, 2*n)
	// Every tunnel's bytes are written first, then read: all wake at once.
	for i, ex := range held {
		if _, err := fmt.Fprintf(ex.upstream, "answer %04d", i); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(ex.client, "request %04d", i); err != nil {
			t.Fatal(err)
		}
	}
	for i, ex := range held {
		want := fmt.Sprintf("answer %04d", i)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(ex.client, got); err != nil || string(got) != want {
			t.Fatalf("tunnel %d: client read %q (%v), want %q", i, got, err, want)
		}
		want = fmt.Sprintf("request %04d", i)
		got = make([]byte, len(want))
		if _, err := io.ReadFull(ex.upstream, got); err != nil || string(got) != want {
			t.Fatalf("tunnel %d: upstream read %q (%v), want %q", i, got, err, want)
		}
	}
	waitParked(t, gw.srv, 2*n)
	for _, ex := range held {
		ex.close()
	}
	gw.logs.waitDecisions(t, n)
	waitParked(t, gw.srv, 0)
}
