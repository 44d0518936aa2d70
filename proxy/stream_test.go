package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/hookgate/hookgate/config"
)

// hideCanary replaces the canary in every letter case, so that a failure
// message can show what the client got without printing the secret.
func hideCanary(s string) string {
	var b strings.Builder
	lower := strings.ToLower(s)
	for {
		i := strings.Index(lower, canary)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString("<CANARY>")
		s, lower = s[i+len(canary):], lower[i+len(canary):]
	}
}

// assertNoCanaryFold fails if the canary reached the client in any letter
// case (Go rewrites the case of header names).
func assertNoCanaryFold(t *testing.T, got string) {
	t.Helper()
	if strings.Contains(strings.ToLower(got), canary) {
		t.Fatalf("the secret reached the client:\n%s", hideCanary(got))
	}
}

// TestMITMStreamsEventsAsTheyCome: an event stream through interception
// with a secret to scrub reaches the client event by event. The upstream
// sends each event only after the client has received the one before, so
// an event held back by the gateway stalls the exchange until the deadline.
func TestMITMStreamsEventsAsTheyCome(t *testing.T) {
	acks := make(chan struct{})
	over := make(chan struct{}) // the test has ended: stop waiting for acks
	events := func(auth string) []string {
		return []string{
			"data: {\"delta\":\"Hel\"}\n\n",
			"data: x\n\n",
			"data: " + auth + "\n\n", // an echo, masked on the way
			"data: ends in the start of a secret: B\n\n",
			"event: done\ndata: [DONE]\n\n",
		}
	}
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, ev := range events(r.Header.Get("Authorization")) {
			_, _ = io.WriteString(w, ev)
			if rc.Flush() != nil {
				return
			}
			select {
			case <-acks:
			case <-r.Context().Done():
				return
			case <-over:
				return
			}
		}
	}, nil)
	t.Cleanup(func() { close(over) }) // runs before the upstream is closed
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", env.url("telemetry.example.com", "/v1/stream"), nil)
	resp, err := env.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i, want := range events(maskedAuth) {
		got, err := readEvent(br)
		if err != nil {
			t.Fatalf("event %d did not arrive before the next was sent: %v", i, err)
		}
		if got != want {
			t.Fatalf("event %d = %q, want %q", i, hideCanary(got), want)
		}
		select {
		case acks <- struct{}{}:
		case <-ctx.Done():
			t.Fatal("the upstream did not wait for the acknowledgement")
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the last event: %v", err)
	}
	resp.Body.Close()
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if d["status"] != 200.0 || d["bytes_out"].(float64) <= 0 {
		t.Fatalf("decision = %v", d)
	}
	env.assertNoCanary(t)
}

// readEvent reads one server-sent event, up to and including its blank line.
func readEvent(br *bufio.Reader) (string, error) {
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			return ev.String(), err
		}
		if line == "\n" {
			return ev.String(), nil
		}
	}
}

// mitmTLS opens an intercepted tunnel to host and returns the client side
// of the TLS connection inside it, trusting only our CA.
func mitmTLS(t *testing.T, env *mitmEnv, host string) *tls.Conn {
	t.Helper()
	conn, resp := connect(t, env.gw, host+":"+env.upstream)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: env.caPool, ServerName: host})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// writeClientFrame writes one masked WebSocket text frame, as a client must.
func writeClientFrame(w io.Writer, payload []byte) error {
	hdr := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var key [4]byte
	_, _ = rand.Read(key[:])
	hdr = append(hdr, key[:]...)
	masked := make([]byte, len(payload))
	for i, c := range payload {
		masked[i] = c ^ key[i%4]
	}
	_, err := w.Write(append(hdr, masked...))
	return err
}

// readServerFrame reads one unmasked WebSocket frame and returns its
// payload; a frame whose header does not add up is an error.
func readServerFrame(br *bufio.Reader) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, err
	}
	if hdr[0] != 0x81 || hdr[1]&0x80 != 0 {
		return nil, fmt.Errorf("unexpected frame header % x", hdr)
	}
	n := uint64(hdr[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload := make([]byte, n)
	_, err := io.ReadFull(br, payload)
	return payload, err
}

// wsEcho is a WebSocket upstream: its handshake answer echoes the
// Authorization it got in X-Echo, its first message says "auth <value>",
// then it echoes what it receives.
func wsEcho() http.HandlerFunc {
	srv := &websocket.Server{
		Handshake: func(cfg *websocket.Config, r *http.Request) error {
			cfg.Header = http.Header{"X-Echo": {r.Header.Get("Authorization")}}
			return nil
		},
		Handler: func(ws *websocket.Conn) {
			if websocket.Message.Send(ws, "auth "+ws.Request().Header.Get("Authorization")) != nil {
				return
			}
			for range 10 {
				var msg string
				if websocket.Message.Receive(ws, &msg) != nil || websocket.Message.Send(ws, msg) != nil {
					return
				}
			}
		},
	}
	return srv.ServeHTTP
}

// TestWebSocketToTransformHost: a WebSocket upgrade to a transform host,
// intercepted or forwarded as plain HTTP (allow_plaintext), gets the
// credential on its handshake; frames go both ways; the handshake answer
// and every frame from the upstream are scrubbed with masks of the same
// length, so the frames stay valid; the request has one decision line,
// written when the connection ends, with the bytes of both directions.
func TestWebSocketToTransformHost(t *testing.T) {
	plain := newUpstream(t, false, wsEcho())
	env := newMITMEnv(t, wsEcho(), func(gc *gatewayConfig) {
		gc.exempt = append(gc.exempt, plain.hostPort())
		gc.allow = append(gc.allow, "open.test")
		gc.names["open.test"] = []string{"127.0.0.1"}
		gc.entries = append(gc.entries, config.Entry{}, config.Entry{Transform: gc.entries[0].Transform, AllowPlaintext: true})
	})
	t.Run("intercepted", func(t *testing.T) {
		tc := mitmTLS(t, env, "telemetry.example.com")
		wsExchange(t, tc, "/ws", "telemetry.example.com:"+env.upstream, env.up)
		checkWSDecision(t, env, "mitm")
	})
	t.Run("forwarded", func(t *testing.T) {
		c := dialTimeout(t, env.gw.addr)
		host := "open.test:" + plain.port()
		wsExchange(t, c, "http://"+host+"/ws", host, plain)
		checkWSDecision(t, env, "http")
	})
}

// wsExchange does the handshake and exchanges messages over c, then closes
// it.
func wsExchange(t *testing.T, c net.Conn, target, host string, up *upstream) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer sandbox-own\r\n\r\n", target, host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("handshake answer: %d %v", resp.StatusCode, resp.Header)
	}
	if got := resp.Header.Get("X-Echo"); got != "[redacted]" {
		t.Fatalf("handshake answer's echo = %q, want it scrubbed", hideCanary(got))
	}
	reqs := up.requests()
	if got := reqs[len(reqs)-1].Header.Get("Authorization"); got != "Bearer "+canary {
		t.Fatal("the handshake did not carry the injected credential")
	}
	first, err := readServerFrame(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != "auth "+maskedAuth {
		t.Fatalf("first frame = %q, want the echoed credential masked", hideCanary(string(first)))
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 6000)
	copy(big[32<<10-10:], canary) // across the scrubber's work buffer
	copy(big[len(big)-len(canary):], canary)
	for _, msg := range [][]byte{[]byte("hello"), []byte("say " + canary + " back"), big} {
		if err := writeClientFrame(c, msg); err != nil {
			t.Fatal(err)
		}
		got, err := readServerFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.ReplaceAll(msg, []byte(canary), []byte("[redacted]"+strings.Repeat("*", len(canary)-len("[redacted]"))))
		if !bytes.Equal(got, want) {
			t.Fatalf("echo of a %d-byte message differs: %q", len(msg), hideCanary(string(got[:min(len(got), 80)])))
		}
	}
}

// checkWSDecision waits for the line of the connection wsExchange closed:
// the only line of its mode, written once the connection has ended.
func checkWSDecision(t *testing.T, env *mitmEnv, mode string) {
	t.Helper()
	var lines []map[string]any
	env.gw.logs.Wait(t, 5*time.Second, func(string) bool {
		lines = lines[:0]
		for _, l := range env.gw.logs.decisions(t) {
			if l["mode"] == mode {
				lines = append(lines, l)
			}
		}
		return len(lines) > 0
	})
	if len(lines) != 1 {
		t.Fatalf("%d decision lines of mode %s, want 1: %v", len(lines), mode, lines)
	}
	if d := lines[0]; d["status"] != 101.0 || fmt.Sprint(d["injected"]) != "[Authorization]" || d["verdict"] != "allow" ||
		d["bytes_in"].(float64) < 96000 || d["bytes_out"].(float64) < 96000 {
		t.Fatalf("decision = %v", d)
	}
	env.assertNoCanary(t)
}

// switchingUpstream honours any Upgrade it is sent by switching protocols
// (as an h2c server does), and on /always switches even unasked; otherwise
// it says whether it saw an upgrade.
func switchingUpstream(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "" || r.URL.Path == "/always" {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
		_ = brw.Flush()
		_ = c.Close()
		return
	}
	fmt.Fprintf(w, "no upgrade; Connection %q", r.Header.Get("Connection"))
}

// TestUpgradeOnlyWebSocket: an Upgrade to anything but websocket (h2c here)
// is removed from the request on every path, so the upstream answers in
// HTTP/1.1; an upstream that switches protocols unasked gets a 502.
func TestUpgradeOnlyWebSocket(t *testing.T) {
	plain := newUpstream(t, false, switchingUpstream)
	env := newMITMEnv(t, switchingUpstream, func(gc *gatewayConfig) {
		gc.exempt = append(gc.exempt, plain.hostPort())
		gc.allow = append(gc.allow, "plain.test")
		gc.names["plain.test"] = []string{"127.0.0.1"}
	})
	transparentAddr := transparentGateway(t, env, plain.hostPort())
	const h2c = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
	send := map[string]func(t *testing.T, path string) *http.Response{
		"forwarded": func(t *testing.T, path string) *http.Response {
			c := dialTimeout(t, env.gw.addr)
			fmt.Fprintf(c, "GET http://plain.test:%s%s HTTP/1.1\r\nHost: plain.test:%s\r\n%s\r\n", plain.port(), path, plain.port(), h2c)
			return readResponse(t, c)
		},
		"transparent": func(t *testing.T, path string) *http.Response {
			c := dialTimeout(t, transparentAddr)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: plain.test\r\n%s\r\n", path, h2c)
			return readResponse(t, c)
		},
		"intercepted": func(t *testing.T, path string) *http.Response {
			tc := mitmTLS(t, env, "telemetry.example.com")
			fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: telemetry.example.com:%s\r\n%s\r\n", path, env.upstream, h2c)
			return readResponse(t, tc)
		},
	}
	for name, do := range send {
		t.Run(name, func(t *testing.T) {
			resp := do(t, "/")
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != `no upgrade; Connection ""` {
				t.Fatalf("h2c upgrade: %d %q, want the upstream to see no upgrade", resp.StatusCode, body)
			}
			denialOf(t, do(t, "/always"), http.StatusBadGateway, CodeUpstreamError)
		})
	}
}

func readResponse(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// newAnsweringUpstream is a raw upstream that reads one request head and
// hands the connection to answer.
func newAnsweringUpstream(t *testing.T, cfg *tls.Config, answer func(c net.Conn, br *bufio.Reader, r *http.Request)) *rawUpstream {
	t.Helper()
	u := newRawUpstream(t, cfg)
	u.serve(func(c net.Conn, br *bufio.Reader) {
		if r, err := http.ReadRequest(br); err == nil {
			answer(c, br, r)
		}
	})
	return u
}

// rawEnv is a gateway with an intercepted transform host (telemetry, over
// TLS) and a plain-HTTP one with allow_plaintext (open), both served by
// raw upstreams.
type rawEnv struct {
	*mitmEnv
	tlsUp, plainUp *rawUpstream
}

func newRawEnv(t *testing.T, answer func(c net.Conn, br *bufio.Reader, r *http.Request)) *rawEnv {
	t.Helper()
	var re rawEnv
	re.mitmEnv = newMITMEnv(t, nil, func(gc *gatewayConfig) {
		// The test certificate of the (unused) httptest upstream, which
		// the gateway trusts, serves the raw TLS upstream too.
		re.tlsUp = newAnsweringUpstream(t, &tls.Config{Certificates: gc.roots.TLS.Certificates}, answer)
		re.plainUp = newAnsweringUpstream(t, nil, answer)
		gc.exempt = append(gc.exempt, re.tlsUp.addr(), re.plainUp.addr())
		gc.allow = append(gc.allow, "open.test")
		gc.names["open.test"] = []string{"127.0.0.1"}
		gc.entries = append(gc.entries, config.Entry{}, config.Entry{Transform: gc.entries[0].Transform, AllowPlaintext: true})
	})
	re.upstream = re.tlsUp.port()
	return &re
}

// intercepted sends a raw request through an intercepted tunnel and returns
// every byte the client got until the gateway closed the connection.
func (re *rawEnv) intercepted(t *testing.T, request string) string {
	t.Helper()
	tc := mitmTLS(t, re.mitmEnv, "telemetry.example.com")
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(tc, request, "telemetry.example.com:"+re.upstream)
	out, _ := io.ReadAll(tc)
	return string(out)
}

// forwarded sends a raw absolute-form request for open.test.
func (re *rawEnv) forwarded(t *testing.T, request string) string {
	t.Helper()
	c := dialTimeout(t, re.gw.addr)
	request = strings.Replace(request, " /", " http://open.test:"+re.plainUp.port()+"/", 1)
	fmt.Fprintf(c, request, "open.test:"+re.plainUp.port())
	out, _ := io.ReadAll(c)
	return string(out)
}

// TestScrubEveryUpstreamByte: upstreams that write exact bytes echo the
// secret where the scrubber used to look too early or not at all; the
// secret reaches the client in no letter case, and the rest of the answer
// does.
func TestScrubEveryUpstreamByte(t *testing.T) {
	const (
		get       = "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
		websocket = "GET / HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	)
	tests := []struct {
		name   string
		answer string
		want   []string // in what the client gets
		paths  []string
	}{
		{
			name: "trailers",
			answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Echo\r\nConnection: close\r\n\r\n" +
				"5\r\nhello\r\n0\r\nX-Echo: Bearer " + canary + "\r\nX-Late: " + canary + "\r\nX-" + canary + ": 1\r\n\r\n",
			want:  []string{"hello", "X-Echo: [redacted]", "X-Late: [redacted]"},
			paths: []string{"intercepted", "forwarded"},
		},
		{
			name:   "header name",
			answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nx-" + canary + ": 1\r\nX-Ok: yes\r\nConnection: close\r\n\r\nhello",
			want:   []string{"X-Ok: yes", "hello"},
			paths:  []string{"intercepted", "forwarded"},
		},
		{
			name: "websocket",
			answer: "HTTP/1.1 101 Switching " + canary + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Echo: " + canary + "\r\n\r\n" +
				"\x81" + string(rune(len("hi "+canary))) + "hi " + canary,
			want:  []string{"101 Switching ", "X-Echo: [redacted]", "hi [redacted]"},
			paths: []string{"intercepted", "forwarded"},
		},
		{
			name:   "malformed answer quoting the secret",
			answer: "HTTP/1.1 200 OK\r\nbroken " + canary + "\r\n\r\n",
			want:   []string{"502 Bad Gateway", string(CodeUpstreamError)},
			paths:  []string{"intercepted", "forwarded"},
		},
	}
	for _, tt := range tests {
		re := newRawEnv(t, func(c net.Conn, _ *bufio.Reader, _ *http.Request) { _, _ = io.WriteString(c, tt.answer) })
		for _, path := range tt.paths {
			t.Run(tt.name+"/"+path, func(t *testing.T) {
				request := get
				if tt.name == "websocket" {
					request = websocket
				}
				var got string
				if path == "intercepted" {
					got = re.intercepted(t, request)
				} else {
					got = re.forwarded(t, request)
				}
				assertNoCanaryFold(t, got)
				for _, w := range tt.want {
					if !strings.Contains(got, w) {
						t.Fatalf("want %q in the answer:\n%s", w, hideCanary(got))
					}
				}
			})
		}
		re.assertNoCanary(t)
	}
}

// TestScrubInformational: 103 Early Hints and 100 Continue answers to a
// request that expects 100-continue reach the client through interception,
// scrubbed like any header.
func TestScrubInformational(t *testing.T) {
	re := newRawEnv(t, func(c net.Conn, br *bufio.Reader, r *http.Request) {
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </app.css?k="+canary+">; rel=preload\r\n\r\n"+
			"HTTP/1.1 100 Continue\r\nX-Echo: "+canary+"\r\nX-"+canary+": 1\r\n\r\n")
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	})
	got := re.intercepted(t, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\nhello")
	assertNoCanaryFold(t, got)
	for _, w := range []string{"HTTP/1.1 103 Early Hints\r\nLink: </app.css?k=[redacted]>; rel=preload\r\n", "X-Echo: [redacted]", "200 OK", "hello"} {
		if !strings.Contains(got, w) {
			t.Fatalf("want %q in the answer:\n%s", w, hideCanary(got))
		}
	}
	re.assertNoCanary(t)
}
