package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// TestShutdownClosesIdleTunnels: http.Server.Shutdown does not see hijacked
// connections; ours waits for them until the deadline, then closes them.
func TestShutdownClosesIdleTunnels(t *testing.T) {
	up := newUpstream(t, true, nil)
	al, _ := allowlist.New([]string{"example.com"})
	addrs, _ := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{Exempt: []netip.AddrPort{netip.MustParseAddrPort(up.hostPort())}})
	srv, err := New(Options{
		Policy:   &config.Policy{Allowlist: al, Addrs: addrs},
		Resolver: &staticResolver{table: map[string][]netip.Addr{"example.com": {netip.MustParseAddr("127.0.0.1")}}},
		Logger:   zerolog.Nop(),
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
	gw := &gateway{srv: srv, addr: ln.Addr().String()}

	c, resp := connect(t, gw, "example.com:"+up.port())
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	cfg := up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "example.com"
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// The tunnel is open and idle. Shutdown must give up waiting at its
	// deadline and close it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("tunnel still open after shutdown")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("tunnel still open after shutdown (read timed out instead of EOF)")
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
}

// TestShutdownLetsTunnelsFinish: a tunnel in use when Shutdown starts may
// finish its exchange within the grace period.
func TestShutdownLetsTunnelsFinish(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "finished")
	})
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"example.com": {"127.0.0.1"}},
	})
	got := make(chan string, 1)
	go func() {
		resp, err := gw.client(t, up.Server).Get("https://example.com:" + up.port() + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(up.requests()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- gw.srv.Shutdown(ctx)
	}()
	waitRefused(t, gw.addr) // the shutdown has begun
	close(release)
	if body := <-got; body != "finished" {
		t.Fatalf("in-flight request through the tunnel: %q", body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// waitRefused returns once addr refuses new connections: a shutdown has
// closed its listener.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	t.Fatalf("%s still accepts connections", addr)
}
