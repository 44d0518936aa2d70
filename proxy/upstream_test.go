package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawUpstream is a loopback origin that speaks raw bytes, for the answers no
// HTTP server gives: malformed on purpose, cut off, reset, framed exactly.
// It records every byte it receives and hands each connection to the
// handler given to serve; answerOK is the handler of a well-behaved origin.
type rawUpstream struct {
	ln  net.Listener
	wg  sync.WaitGroup
	mu  sync.Mutex
	raw bytes.Buffer // every byte received, on every connection
	req []rawRequest // what the handlers recorded
	cs  []net.Conn   // closed at cleanup: a handler may be waiting on one
}

// rawRequest is one request as the upstream read it.
type rawRequest struct {
	method, target string
	header         http.Header
	body           string
	complete       bool // the body was read to its end
}

// newRawUpstream listens on loopback, with TLS when cfg is set. It accepts
// nothing until serve is called.
func newRawUpstream(t testing.TB, cfg *tls.Config) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	u := &rawUpstream{ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		u.mu.Lock()
		for _, c := range u.cs {
			_ = c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

// serve accepts connections and hands each to handle, with a reader that
// records what it reads; the connection is closed when handle returns, and
// cut after 10 s in any case.
func (u *rawUpstream) serve(handle func(c net.Conn, br *bufio.Reader)) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := u.ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.cs = append(u.cs, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				handle(c, bufio.NewReader(io.TeeReader(c, (*rawRecorder)(u))))
			}()
		}
	}()
}

// rawRecorder is the io.Writer that keeps the bytes a connection delivered.
type rawRecorder rawUpstream

func (r *rawRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.raw.Write(p)
}

// answerOK reads requests one after the other, records each with its body,
// and answers every complete one 200 "ok" on the same connection.
func (u *rawUpstream) answerOK(c net.Conn, br *bufio.Reader) {
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		u.record(rawRequest{method: req.Method, target: req.RequestURI, header: req.Header, body: string(body), complete: err == nil})
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

// record keeps a request a handler read.
func (u *rawUpstream) record(r rawRequest) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.req = append(u.req, r)
}

// received returns every byte received so far and the recorded requests.
func (u *rawUpstream) received() (string, []rawRequest) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.raw.String(), append([]rawRequest(nil), u.req...)
}

func (u *rawUpstream) addr() string { return u.ln.Addr().String() }

func (u *rawUpstream) port() string {
	_, p, _ := net.SplitHostPort(u.addr())
	return p
}

// waitRaw polls (bounded) until the upstream has received bytes that
// contain want.
func (u *rawUpstream) waitRaw(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		raw, _ := u.received()
		if strings.Contains(raw, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream never received %q", want)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// reset closes a connection with a TCP RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
