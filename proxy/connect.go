package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hookgate/hookgate/allowlist"
)

// serveConnect handles CONNECT host:port: judge, resolve and judge the
// addresses, and only then answer 200; peek the ClientHello and require its
// SNI to name the CONNECT host; then dial the judged address and splice.
// Everything refused before the 200 gets a readable 403; nothing is dialled
// for a refused tunnel.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	d := newDecision(clientAddr(r), modeTunnel)
	d.method = r.Method
	defer d.log(&s.log)

	if r.URL.User != nil || strings.Contains(r.Host, "@") {
		s.refuseConnect(w, d, badRequest(r.Host, "userinfo is not allowed in a CONNECT target"))
		return
	}
	rawHost, rawPort, err := net.SplitHostPort(r.Host)
	if err != nil {
		s.refuseConnect(w, d, badRequest(r.Host, "CONNECT needs host:port, got %q", r.Host))
		return
	}
	t, den := parseTarget(rawHost, rawPort, 0)
	d.host, d.port = t.host, t.port
	if den != nil {
		s.refuseConnect(w, d, den)
		return
	}
	p := s.policy.Load()
	v, den := judge(p, t)
	if v.Allowed {
		d.entry = v.Entry.Domain
	}
	if den != nil {
		s.refuseConnect(w, d, den)
		return
	}
	g := *s.guard
	g.Addrs = p.Addrs
	dest, err := g.Resolve(r.Context(), t.host, t.ip, t.port)
	if err != nil {
		s.refuseConnect(w, d, classifyUpstream(err, t.host))
		return
	}

	hj, ok := w.(http.Hijacker)
	if !ok {
		s.refuseConnect(w, d, badRequest(t.host, "CONNECT is only supported over HTTP/1.1"))
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		d.refuse(classifyUpstream(err, t.host))
		return
	}
	s.tunnels.Add(1)
	defer s.tunnels.Done()
	s.track(client)
	defer s.untrack(client)
	defer client.Close()

	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		d.refuse(deny(CodeUpstreamError, 0, t.host, "client went away before the tunnel opened"))
		return
	}
	d.status = http.StatusOK

	// The ClientHello: the client may have sent it right behind the CONNECT,
	// in which case the HTTP server's reader holds its first bytes.
	_ = client.SetReadDeadline(time.Now().Add(s.timeouts.ClientHello))
	hello, helloBytes, err := peekClientHello(io.MultiReader(buf.Reader, client))
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		_, _ = client.Write(tlsAlertAccessDenied)
		d.refuse(deny(CodeProtocol, 0, t.host, "a tunnel must start with a TLS ClientHello: %v", helloErrReason(err)))
		return
	}
	d.sni = hello.ServerName
	if den := checkSNI(t, hello.ServerName); den != nil {
		_, _ = client.Write(tlsAlertAccessDenied)
		d.refuse(den)
		return
	}
	// Replay what the peek consumed, and anything still buffered behind it
	// (a client that sent more before our 200).
	if rest := buf.Reader.Buffered(); rest > 0 {
		more, _ := buf.Reader.Peek(rest)
		helloBytes = append(helloBytes, more...)
	}
	if rules := p.rules(v); rules.Transform != nil {
		s.serveMITM(r.Context(), &replayConn{Conn: client, replay: helloBytes}, t, dest, rules, g, d)
		return
	}

	upstream, err := g.Dial(r.Context(), dest)
	if err != nil {
		_, _ = client.Write(tlsAlertAccessDenied)
		d.refuse(classifyUpstream(err, t.host))
		return
	}
	defer upstream.Close()
	d.setUpstream(upstream)
	if _, err := upstream.Write(helloBytes); err != nil {
		d.refuse(classifyUpstream(err, t.host))
		return
	}
	d.addIn(int64(len(helloBytes)))
	splice(client, upstream, d, s.timeouts.TunnelIdle)
}

// replayConn is a client connection whose first reads return bytes already
// read from it (the peeked ClientHello).
type replayConn struct {
	net.Conn
	replay []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// refuseConnect answers a CONNECT before any 200.
func (s *Server) refuseConnect(w http.ResponseWriter, d *decision, den *denial) {
	d.refuse(den)
	den.write(w)
}

// checkSNI binds the tunnel to the host that was allowed: the SNI must name
// it (case-insensitively, one trailing dot ignored). A tunnel to an IP
// literal may carry no SNI (clients do not send IP literals as SNI).
func checkSNI(t target, sni string) *denial {
	if sni == "" {
		if t.ip.IsValid() {
			return nil
		}
		return deny(CodeSNIMismatch, 0, t.host, "the TLS ClientHello names no server, but the tunnel was opened to %s", t.host)
	}
	name, _, err := allowlist.NormalizeHost(sni)
	if err != nil || name != t.host {
		return deny(CodeSNIMismatch, 0, t.host, "the TLS ClientHello names %q, but the tunnel was opened to %s", sni, t.host)
	}
	return nil
}

func helloErrReason(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "none arrived in time"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the client closed the connection"
	case errors.Is(err, errNotTLS):
		return "the first bytes are not TLS"
	}
	return "it could not be parsed"
}

// splice copies both ways until both directions are done, half-closing each
// side as the other finishes, and counts the bytes. A tunnel with no traffic
// either way for idle is closed.
func splice(client, upstream net.Conn, d *decision, idle time.Duration) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		n := copyIdle(upstream, client, idle)
		d.addIn(n)
		closeWrite(upstream)
	}()
	go func() {
		defer wg.Done()
		n := copyIdle(client, upstream, idle)
		d.addOut(n)
		closeWrite(client)
	}()
	wg.Wait()
}

// copyIdle copies src to dst, extending src's read deadline by idle before
// each read so that a dead tunnel does not live forever.
func copyIdle(dst, src net.Conn, idle time.Duration) int64 {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				return total
			}
		}
		if err != nil {
			return total
		}
	}
}

func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := unwrapConn(c).(closeWriter); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// unwrapConn reaches the TCP connection under our framing wrapper.
func unwrapConn(c net.Conn) net.Conn {
	if fc, ok := c.(*framingConn); ok {
		return fc.Conn
	}
	return c
}
