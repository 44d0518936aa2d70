package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countConns makes an upstream configuration that counts the connections
// it accepts.
func countConns(n *atomic.Int32) func(*http.Server) {
	return func(srv *http.Server) {
		srv.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				n.Add(1)
			}
		}
	}
}

// signalClosed sends on closed (if it has room) whenever the upstream
// closes a connection, after whatever ConnState hook was set before it.
func signalClosed(closed chan<- struct{}) func(*http.Server) {
	return func(srv *http.Server) {
		prev := srv.ConnState
		srv.ConnState = func(c net.Conn, s http.ConnState) {
			if prev != nil {
				prev(c, s)
			}
			if s == http.StateClosed {
				select {
				case closed <- struct{}{}:
				default: // nobody waits for this one
				}
			}
		}
	}
}

// keepAliveClient sends requests one after the other on one connection to
// the gateway and reads each response.
type keepAliveClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func newKeepAliveClient(t *testing.T, gw *gateway) *keepAliveClient {
	c := dialTimeout(t, gw.addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &keepAliveClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (k *keepAliveClient) do(raw string) (*http.Response, string) {
	k.t.Helper()
	if _, err := io.WriteString(k.c, raw); err != nil {
		k.t.Fatal(err)
	}
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(k.br, &http.Request{Method: method})
	if err != nil {
		k.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestForwardReusesUpstreamConnection(t *testing.T) {
	var conns atomic.Int32
	up := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}, countConns(&conns))
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	k := newKeepAliveClient(t, gw)
	target := "http://" + up.hostPort()
	for i, req := range []string{
		"GET " + target + "/a HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST " + target + "/b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HEAD " + target + "/c HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST " + target + "/d HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
	} {
		resp, body := k.do(req)
		want := []string{"GET /a ", "POST /b abc", "", "POST /d hi"}[i]
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("request %d: %d %q, want %q", i, resp.StatusCode, body, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("upstream accepted %d connections for one keep-alive client, want 1", n)
	}
}

// TestForwardRetriesStaleUpstream: the upstream closes an idle keep-alive
// connection; the next request (no body) is sent again on a fresh one.
func TestForwardRetriesStaleUpstream(t *testing.T) {
	var conns atomic.Int32
	closed := make(chan struct{}, 8)
	up := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.URL.Path) },
		countConns(&conns), signalClosed(closed), func(srv *http.Server) { srv.IdleTimeout = 50 * time.Millisecond })
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	k := newKeepAliveClient(t, gw)
	target := "http://" + up.hostPort()
	if _, body := k.do("GET " + target + "/first HTTP/1.1\r\nHost: x\r\n\r\n"); body != "/first" {
		t.Fatalf("first: %q", body)
	}
	select { // the upstream closes the idle connection
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream did not close the idle connection")
	}
	if resp, body := k.do("GET " + target + "/second HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != "/second" {
		t.Fatalf("after the upstream closed its side: %d %q", resp.StatusCode, body)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("upstream accepted %d connections, want 2", n)
	}
}

// TestForwardNewHostNewConnection: a keep-alive client switching hosts gets
// a connection per host, each judged by the guard.
func TestForwardNewHostNewConnection(t *testing.T) {
	a := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "a") })
	b := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "b") })
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{a.hostPort(), b.hostPort()}})
	k := newKeepAliveClient(t, gw)
	for i, target := range []string{a.hostPort(), b.hostPort(), a.hostPort(), "127.0.0.1:" + closedPort(t)} {
		resp, body := k.do("GET http://" + target + "/ HTTP/1.1\r\nHost: x\r\n\r\n")
		if i == 3 {
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderProxyError) != string(CodeAddressPolicy) {
				t.Fatalf("a loopback port that is not exempt: %d %s", resp.StatusCode, resp.Header.Get(HeaderProxyError))
			}
			continue
		}
		if want := []string{"a", "b", "a"}[i]; body != want {
			t.Fatalf("request %d: %q, want %q", i, body, want)
		}
	}
}

// TestForwardSlowAnswer: an answer that begins only after the gateway has
// started watching the client (after watchClientAfter), behind an
// informational one, still arrives; the upstream connection is kept and
// serves the next request.
func TestForwardSlowAnswer(t *testing.T) {
	var conns atomic.Int32
	up := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			time.Sleep(4 * watchClientAfter)
		}
		fmt.Fprint(w, r.URL.Path)
	}, countConns(&conns))
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	k := newKeepAliveClient(t, gw)
	target := "http://" + up.hostPort()
	for _, path := range []string{"/slow", "/fast", "/slow"} {
		if resp, body := k.do("GET " + target + path + " HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("upstream accepted %d connections, want 1", n)
	}
	lines := gw.logs.waitDecisions(t, 3)
	for _, line := range lines {
		checkLine(t, line, map[string]any{"verdict": "allow", "status": 200})
	}
}

// TestForwardAnswerHeaderInPieces: an answer whose header begins at once
// but ends only after watchClientAfter has the whole response-header
// timeout for the rest, not the short wait before the client is watched.
func TestForwardAnswerHeaderInPieces(t *testing.T) {
	up := newRawUpstream(t, nil)
	up.serve(func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			time.Sleep(4 * watchClientAfter)
			_, _ = io.WriteString(c, "Content-Length: 2\r\n\r\nok")
		}
	})
	addr := up.addr()
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{addr}})
	k := newKeepAliveClient(t, gw)
	for range 2 {
		if resp, body := k.do("GET http://" + addr + "/ HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
}
