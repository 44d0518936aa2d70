package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// transparentGateway starts ServeTransparent on loopback, with the original
// destination of every connection fixed to orig (no redirect rules here; the
// netns and e2e tests cover real redirection).
func transparentGateway(t *testing.T, env *mitmEnv, orig string) string {
	t.Helper()
	env.gw.srv.origDst = func(net.Conn) (netip.AddrPort, error) { return netip.MustParseAddrPort(orig), nil }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- env.gw.srv.ServeTransparent(ln) }()
	t.Cleanup(func() {
		// Cleanups run last-in first-out: shut down here (startGateway's
		// cleanup shuts down again, harmlessly) so that this one can wait.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = env.gw.srv.Shutdown(ctx)
		select {
		case err := <-done:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("ServeTransparent: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeTransparent did not return after Shutdown")
		}
	})
	return ln.Addr().String()
}

func dialTimeout(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTransparentHTTP(t *testing.T) {
	plain := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Host) })
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) {
		gc.exempt = append(gc.exempt, plain.hostPort())
		gc.allow = append(gc.allow, "plain.test")
		gc.names["plain.test"] = []string{"127.0.0.1"}
	})
	addr := transparentGateway(t, env, plain.hostPort())
	c := dialTimeout(t, addr)
	fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: plain.test\r\n\r\nGET /y HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n")
	out, _ := io.ReadAll(c)
	got := string(out)
	if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "plain.test:"+plain.port()) {
		t.Fatalf("first answer:\n%s", got)
	}
	if !strings.Contains(got, "HTTP/1.1 403 ") || !strings.Contains(got, "X-Proxy-Error: blocked-by-allowlist") {
		t.Fatalf("second answer:\n%s", got)
	}
	lines := env.gw.logs.waitDecisions(t, 2)
	for _, d := range lines {
		if d["transparent"] != true || d["mode"] != "http" {
			t.Fatalf("decision = %v", d)
		}
	}
}

func TestTransparentTLSTunnelAndMITM(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	addr := transparentGateway(t, env, "127.0.0.1:"+env.upstream)
	pool := env.caPool.Clone()
	pool.AddCert(env.up.Certificate())
	for host, want := range map[string]string{
		"other.example.com":     "|0",              // tunnelled, nothing injected
		"telemetry.example.com": maskedAuth + "|1", // intercepted, injected, echo scrubbed
	} {
		t.Run(host, func(t *testing.T) {
			tc := tls.Client(dialTimeout(t, addr), &tls.Config{ServerName: host, RootCAs: pool})
			// The original destination's port is not 443 here, so Host
			// carries it, as a client's would.
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n\r\n", host, env.upstream)
			resp, err := http.ReadResponse(bufioReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != want {
				t.Fatalf("body %q, want %q", body, want)
			}
		})
	}
	if got := env.up.requests(); len(got) != 2 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	for _, d := range env.gw.logs.waitDecisions(t, 2) {
		if d["transparent"] != true {
			t.Errorf("decision without transparent: %v", d)
		}
	}
	env.assertNoCanary(t)
}

func TestTransparentReadableTLSDenial(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	addr := transparentGateway(t, env, "127.0.0.1:"+env.upstream)
	tc := tls.Client(dialTimeout(t, addr), &tls.Config{ServerName: "denied.test", RootCAs: env.caPool})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	resp, err := http.ReadResponse(bufioReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	denialOf(t, resp, http.StatusForbidden, CodeAllowlist)

	// A client that does not trust our CA gets an alert, never a hang.
	c := tls.Client(dialTimeout(t, addr), &tls.Config{ServerName: "denied.test", RootCAs: x509PoolOf(env)})
	if err := c.Handshake(); err == nil {
		t.Fatal("handshake with an untrusted denial certificate succeeded")
	}
	if n := len(env.up.requests()); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
}

func TestTransparentNoSNIUsesOriginalAddress(t *testing.T) {
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) { gc.allow = append(gc.allow, "127.0.0.1") })
	addr := transparentGateway(t, env, "127.0.0.1:"+env.upstream)
	pool := x509PoolOf(env)
	// An IP literal as ServerName: crypto/tls sends no SNI.
	tc := tls.Client(dialTimeout(t, addr), &tls.Config{ServerName: "127.0.0.1", RootCAs: pool})
	fmt.Fprint(tc, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufioReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	tc.Close() // the tunnel's line is written when it ends
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if d["host"] != "127.0.0.1" || d["mode"] != "tunnel" || d["transparent"] != true {
		t.Fatalf("decision = %v", d)
	}
}

func TestTransparentOtherProtocols(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	addr := transparentGateway(t, env, "127.0.0.1:"+env.upstream)
	c := dialTimeout(t, addr)
	_, _ = c.Write([]byte{0x00, 0x01, 0x02})
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Fatalf("read %d bytes from a blocked protocol", n)
	}
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if d["code"] != string(CodeProtocol) {
		t.Fatalf("decision = %v", d)
	}
}

// x509PoolOf trusts only the upstream's own certificate.
func x509PoolOf(env *mitmEnv) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(env.up.Certificate())
	return p
}

func TestOriginalDstNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := OriginalDst(a); err == nil {
		t.Error("OriginalDst of a pipe: no error")
	}
}
