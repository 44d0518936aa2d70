package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
)

// readAnswer reads from c until the gateway closes it or 10 s pass; eof
// says whether it was closed. The gateways of these tests wait a minute for
// a request header, so a gateway that waits instead of answering shows up as
// eof == false.
func readAnswer(c net.Conn) (string, bool) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out bytes.Buffer
	_, err := out.ReadFrom(c)
	var ne net.Error
	return out.String(), err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// sendRaw writes payload to a new connection to addr and reads the answer.
func sendRaw(t *testing.T, addr, payload string) (string, bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	return readAnswer(c)
}

// statusLines lists the status lines of the HTTP answers in a raw stream.
func statusLines(answer string) []string {
	var out []string
	br := bufio.NewReader(strings.NewReader(answer))
	for len(out) < 100 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		out = append(out, resp.Proto+" "+resp.Status)
	}
	return out
}

var slowHeader = Timeouts{ReadHeader: time.Minute, Idle: time.Minute}

// plainGateway is an explicit gateway allowing every host, with a raw
// plain-HTTP upstream reachable as up.test.
func plainGateway(t *testing.T) (*gateway, *rawUpstream, string) {
	t.Helper()
	up := newRawUpstream(t, nil)
	up.serve(up.answerOK)
	gw := startGateway(t, gatewayConfig{
		allow:    []string{"up.test", "blocked.test"},
		exempt:   []string{up.addr()},
		names:    map[string][]string{"up.test": {"127.0.0.1"}, "blocked.test": {"10.1.2.3"}},
		timeouts: slowHeader,
	})
	return gw, up, "up.test:" + up.port()
}

// interceptEnv is a gateway intercepting telemetry.example.com (injecting
// the canary) in front of a raw TLS upstream.
type interceptEnv struct {
	gw     *gateway
	up     *rawUpstream
	caPool *x509.CertPool
	host   string // host:port of the intercepted upstream
}

func newInterceptEnv(t *testing.T) *interceptEnv {
	t.Helper()
	authority, pool := newCA(t)
	leaves := ca.NewLeafCache(authority, 16)
	cert, err := leaves.Get("telemetry.example.com")
	if err != nil {
		t.Fatal(err)
	}
	up := newRawUpstream(t, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"}})
	up.serve(up.answerOK)
	gw := startGateway(t, gatewayConfig{
		allow:    []string{"telemetry.example.com"},
		exempt:   []string{up.addr()},
		names:    map[string][]string{"telemetry.example.com": {"127.0.0.1"}},
		rootPool: pool,
		entries:  []config.Entry{{Transform: compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"})}},
		leaves:   leaves,
		timeouts: slowHeader,
	})
	return &interceptEnv{gw: gw, up: up, caPool: pool, host: "telemetry.example.com:" + up.port()}
}

// dial opens an intercepted tunnel and returns its TLS connection.
func (e *interceptEnv) dial(t *testing.T) *tls.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+e.host+" HTTP/1.1\r\nHost: "+e.host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the 200 byte by byte: nothing of the TLS stream may be taken.
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) && len(head) < 4096 {
		if _, err := c.Read(one); err != nil {
			t.Fatalf("CONNECT answer: %v", err)
		}
		head = append(head, one[0])
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 200 ") {
		t.Fatalf("CONNECT answer: %q", head)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "telemetry.example.com", RootCAs: e.caPool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// exchange writes payload inside a fresh tunnel and reads the answers.
func (e *interceptEnv) exchange(t *testing.T, payload string) (string, bool) {
	t.Helper()
	tc := e.dial(t)
	if _, err := io.WriteString(tc, payload); err != nil {
		t.Fatal(err)
	}
	return readAnswer(tc)
}

// assertNoCanaryIn fails if the canary reached the upstream in a request
// the test expected to be refused.
func assertNoCanaryIn(t *testing.T, raw string) {
	t.Helper()
	if strings.Contains(raw, canary) {
		t.Fatalf("the upstream received the credential with a refused request")
	}
}

// TestInterceptedTunnelRefusesSmugglingShapes (item: inside intercepted
// tunnels the explicit proxy's framing check runs): CL+TE, TE+CL and the
// other refused shapes get 400 and the connection is closed; the upstream
// receives nothing, so never the credential.
func TestInterceptedTunnelRefusesSmugglingShapes(t *testing.T) {
	e := newInterceptEnv(t)
	h := "Host: " + e.host + "\r\n"
	for name, payload := range map[string]string{
		"cl+te":         "POST / HTTP/1.1\r\n" + h + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"te+cl":         "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
		"obs-fold":      "GET / HTTP/1.1\r\n" + h + "X: a\r\n b\r\n\r\n",
		"conflicting":   "POST / HTTP/1.1\r\n" + h + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"bare lf":       "GET / HTTP/1.1\n" + h + "\r\n",
		"te list":       "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"http/1.0 te":   "POST / HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"bad chunk":     "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"chunk bare lf": "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
	} {
		answer, eof := e.exchange(t, payload)
		if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 400 ") || !strings.Contains(answer, "X-Proxy-Error: bad-request") {
			t.Errorf("%s: answer %q, want one 400 bad-request", name, answer)
		}
		if !eof {
			t.Errorf("%s: the connection was not closed after the 400", name)
		}
	}
	raw, reqs := e.up.received()
	assertNoCanaryIn(t, raw)
	if len(reqs) != 0 || raw != "" {
		t.Fatalf("the upstream received %d requests (%d bytes), want none", len(reqs), len(raw))
	}
}

// TestInterceptedTunnelSmuggledSecondRequest: a good request and a
// smuggling one behind it in one write: the first is forwarded with the
// credential, the second refused, and the upstream receives exactly one.
func TestInterceptedTunnelSmuggledSecondRequest(t *testing.T) {
	e := newInterceptEnv(t)
	h := "Host: " + e.host + "\r\n"
	answer, eof := e.exchange(t, "POST /a HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+
		"POST /b HTTP/1.1\r\n"+h+"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /c HTTP/1.1\r\n"+h+"\r\n")
	got := statusLines(answer)
	if len(got) != 2 || !strings.HasPrefix(got[0], "HTTP/1.1 200 ") || !strings.HasPrefix(got[1], "HTTP/1.1 400 ") || !eof {
		t.Fatalf("answers %q (closed %v), want 200 then 400 and a close", got, eof)
	}
	_, reqs := e.up.received()
	if len(reqs) != 1 || reqs[0].target != "/a" || reqs[0].body != "abc" || reqs[0].header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("the upstream received %d requests, want exactly /a with its body and the credential", len(reqs))
	}
}

// TestInterceptedTunnelBadChunkAfterHead: a chunked body found malformed
// after its header block (with the credential) went upstream: the upstream
// connection is closed before the request is complete.
func TestInterceptedTunnelBadChunkAfterHead(t *testing.T) {
	e := newInterceptEnv(t)
	tc := e.dial(t)
	if _, err := io.WriteString(tc, "POST /a HTTP/1.1\r\nHost: "+e.host+"\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"); err != nil {
		t.Fatal(err)
	}
	e.up.waitRaw(t, "abc")
	if _, err := io.WriteString(tc, "zz\r\nmore\r\n0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_, eof := readAnswer(tc)
	if !eof {
		t.Fatal("the client connection was not closed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, reqs := e.up.received()
		if len(reqs) == 1 {
			if reqs[0].complete {
				t.Fatalf("the upstream received a complete request: body %q", reqs[0].body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream connection was not closed: %d requests ended", len(reqs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestInterceptedTunnelTransferEncodingSpellings: CHUNKED and a chunked
// with tabs around it are read as chunked, by the checker and net/http
// alike, and the body arrives whole.
func TestInterceptedTunnelTransferEncodingSpellings(t *testing.T) {
	e := newInterceptEnv(t)
	for i, te := range []string{"CHUNKED", "\tchunked\t"} {
		answer, _ := e.exchange(t, "POST /"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: "+e.host+"\r\nTransfer-Encoding:"+te+"\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
		if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 200 ") {
			t.Fatalf("TE %q: answers %q", te, got)
		}
	}
	_, reqs := e.up.received()
	if len(reqs) != 2 || reqs[0].body != "abc" || reqs[1].body != "abc" {
		t.Fatalf("the upstream received %+v", reqs)
	}
}

// TestExplicitClosesAfterUpgrade: after a request with Connection: upgrade
// that was not switched, the connection ends; a smuggling request behind it
// is never read.
func TestExplicitClosesAfterUpgrade(t *testing.T) {
	gw, up, target := plainGateway(t)
	answer, eof := sendRaw(t, gw.addr, "GET http://"+target+"/ws HTTP/1.1\r\nHost: "+target+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"+
		"POST http://"+target+"/smuggled HTTP/1.1\r\nHost: "+target+"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if got := statusLines(answer); len(got) != 1 || !eof {
		t.Fatalf("answers %q (closed %v), want one answer and a close", got, eof)
	}
	_, reqs := up.received()
	for _, r := range reqs {
		if r.method == http.MethodPost {
			t.Fatalf("the request behind the upgrade reached the upstream")
		}
	}
}

// TestExplicitClosesAfterRefusedConnect: bytes a client sends behind a
// refused CONNECT are never read as a request.
func TestExplicitClosesAfterRefusedConnect(t *testing.T) {
	gw, up, target := plainGateway(t)
	for _, behind := range []string{
		"GET http://" + target + "/behind HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
		"POST http://" + target + "/behind HTTP/1.1\r\nHost: " + target + "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		answer, eof := sendRaw(t, gw.addr, "CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n"+behind)
		got := statusLines(answer)
		if len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 403 ") || !strings.Contains(answer, "Connection: close") || !eof {
			t.Fatalf("answers %q (closed %v), want one 403 with Connection: close, then a close", got, eof)
		}
	}
	if raw, _ := up.received(); raw != "" {
		t.Fatalf("the upstream received %q", raw)
	}
}

// TestExplicitRefusesTransferEncodingOnHTTP10: net/http ignores
// Transfer-Encoding on HTTP/1.0 (the body would be read as the next
// request); the gateway refuses it.
func TestExplicitRefusesTransferEncodingOnHTTP10(t *testing.T) {
	gw, up, target := plainGateway(t)
	answer, eof := sendRaw(t, gw.addr, "POST http://"+target+"/ HTTP/1.0\r\nHost: "+target+"\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"5\r\nhello\r\n0\r\n\r\nPOST http://"+target+"/smuggled HTTP/1.1\r\nHost: "+target+"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 400 ") || !eof {
		t.Fatalf("answers %q (closed %v), want one 400 and a close", got, eof)
	}
	if raw, _ := up.received(); raw != "" {
		t.Fatalf("the upstream received %q", raw)
	}
}

// TestExplicitSmallerFramingItems: a bare LF, an HTTP/0.9 request, a bad
// chunk size in the first read — each answered 400 at once and closed, with
// nothing sent upstream.
func TestExplicitSmallerFramingItems(t *testing.T) {
	gw, up, target := plainGateway(t)
	for name, payload := range map[string]string{
		"bare lf":     "GET http://" + target + "/ HTTP/1.1\nHost: " + target + "\n\n",
		"http/0.9":    "GET /\r\n",
		"bad chunk":   "POST http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nabc\r\n0\r\n\r\n",
		"te identity": "POST http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nTransfer-Encoding: identity\r\n\r\nabc",
	} {
		answer, eof := sendRaw(t, gw.addr, payload)
		if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 400 ") || !eof {
			t.Errorf("%s: answers %q (closed %v), want one 400 and a close", name, got, eof)
		}
	}
	if raw, _ := up.received(); raw != "" {
		t.Fatalf("the upstream received %q", raw)
	}
}

// TestExpectContinueDenialAnswersAtOnce: a request with Expect:
// 100-continue refused by the address policy gets its 403 and the
// connection is closed, without waiting for a body the client will not send.
func TestExpectContinueDenialAnswersAtOnce(t *testing.T) {
	gw, _, _ := plainGateway(t)
	answer, eof := sendRaw(t, gw.addr, "POST http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
	if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 403 ") || !strings.Contains(answer, string(CodeAddressPolicy)) {
		t.Fatalf("answers %q, want one 403 %s", got, CodeAddressPolicy)
	}
	if !eof {
		t.Fatal("the connection was not closed after the answer")
	}
}

// TestHeaderLimitIsExact: a request head of exactly 64 KiB is forwarded;
// one byte more gets 431.
func TestHeaderLimitIsExact(t *testing.T) {
	gw, up, target := plainGateway(t)
	head := func(size int) string {
		base := "GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\nX-Pad: \r\n\r\n"
		return strings.Replace(base, "X-Pad: ", "X-Pad: "+strings.Repeat("p", size-len(base)), 1)
	}
	answer, _ := sendRaw(t, gw.addr, head(64<<10))
	if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 200 ") {
		t.Fatalf("a 64 KiB head: answers %q, want 200", got)
	}
	answer, eof := sendRaw(t, gw.addr, head(64<<10+1))
	if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 431 ") || !eof {
		t.Fatalf("a 64 KiB + 1 head: answers %q (closed %v), want 431 and a close", got, eof)
	}
	if _, reqs := up.received(); len(reqs) != 1 {
		t.Fatalf("the upstream received %d requests, want 1", len(reqs))
	}
}

// TestForwardAddsNoUserAgent: a request without User-Agent reaches the
// upstream without one; a client's own passes unchanged.
func TestForwardAddsNoUserAgent(t *testing.T) {
	gw, up, target := plainGateway(t)
	sendRaw(t, gw.addr, "GET http://"+target+"/none HTTP/1.1\r\nHost: "+target+"\r\nConnection: close\r\n\r\n")
	sendRaw(t, gw.addr, "GET http://"+target+"/own HTTP/1.1\r\nHost: "+target+"\r\nUser-Agent: agent/1\r\nConnection: close\r\n\r\n")
	raw, reqs := up.received()
	if len(reqs) != 2 {
		t.Fatalf("the upstream received %d requests, want 2", len(reqs))
	}
	if strings.Count(raw, "User-Agent") != 1 || reqs[1].header.Get("User-Agent") != "agent/1" {
		t.Fatalf("the upstream received:\n%s", raw)
	}
}

// TestTransparentHTTPRefusesSmuggling: the transparent listener's plain
// HTTP has the same check: the smuggling request behind a good one is
// refused and never forwarded.
func TestTransparentHTTPRefusesSmuggling(t *testing.T) {
	up := newRawUpstream(t, nil)
	up.serve(up.answerOK)
	gw := startGateway(t, gatewayConfig{
		allow:    []string{"up.test"},
		exempt:   []string{up.addr()},
		names:    map[string][]string{"up.test": {"127.0.0.1"}},
		timeouts: slowHeader,
	})
	addr := transparentGateway(t, &mitmEnv{gw: gw}, up.addr())
	h := "Host: up.test:" + up.port() + "\r\n"
	answer, eof := sendRaw(t, addr, "GET /a HTTP/1.1\r\n"+h+"\r\nPOST /b HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n")
	got := statusLines(answer)
	if len(got) != 2 || !strings.HasPrefix(got[0], "HTTP/1.1 200 ") || !strings.HasPrefix(got[1], "HTTP/1.1 400 ") || !eof {
		t.Fatalf("answers %q (closed %v), want 200 then 400 and a close", got, eof)
	}
	if _, reqs := up.received(); len(reqs) != 1 || reqs[0].target != "/a" {
		t.Fatalf("the upstream received %+v, want only /a", reqs)
	}
}

// earlyConn sends a CONNECT in the same write as the first TLS bytes (as
// clients that do not wait for the 200 do), and skips the 200 when reading.
type earlyConn struct {
	net.Conn
	connect string
	skipped bool
}

func (c *earlyConn) Write(p []byte) (int, error) {
	if c.connect != "" {
		msg := c.connect + string(p)
		c.connect = ""
		if _, err := io.WriteString(c.Conn, msg); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if !c.skipped {
		var head []byte
		one := make([]byte, 1)
		for !bytes.HasSuffix(head, []byte("\r\n\r\n")) && len(head) < 4096 {
			if _, err := c.Conn.Read(one); err != nil {
				return 0, err
			}
			head = append(head, one[0])
		}
		if !strings.HasPrefix(string(head), "HTTP/1.1 200 ") {
			return 0, errors.New("CONNECT refused: " + string(head))
		}
		c.skipped = true
	}
	return c.Conn.Read(p)
}

// TestConnectEarlyClientHello: the bytes a client sends right behind its
// CONNECT are held back from the HTTP parser and handed to the tunnel.
func TestConnectEarlyClientHello(t *testing.T) {
	up := newUpstream(t, true, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"example.com": {"127.0.0.1"}},
		roots:  up.Server,
	})
	c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	target := "example.com:" + up.port()
	ec := &earlyConn{Conn: c, connect: "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"}
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	tc := tls.Client(ec, &tls.Config{ServerName: "example.com", RootCAs: pool})
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+target+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	answer, _ := readAnswer(tc)
	if got := statusLines(answer); len(got) != 1 || !strings.HasPrefix(got[0], "HTTP/1.1 200 ") {
		t.Fatalf("answers %q", got)
	}
}

// TestExplicitUpgradeGetsEarlyBytes: a switched (101) connection is a
// tunnel: bytes the client sent right behind the upgrade request, held back
// from the HTTP parser, reach the upstream.
func TestExplicitUpgradeGetsEarlyBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		line, _ := br.ReadString('\n')
		_, _ = io.WriteString(c, "echo:"+line)
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"ws.test"},
		exempt: []string{ln.Addr().String()},
		names:  map[string][]string{"ws.test": {"127.0.0.1"}},
	})
	target := "ws.test:" + port
	c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET http://"+target+"/ws HTTP/1.1\r\nHost: "+target+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nearly bytes\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answer: %v %v", resp, err)
	}
	line, err := br.ReadString('\n')
	if line != "echo:early bytes\n" {
		t.Fatalf("through the tunnel: %q, %v", line, err)
	}
}
