package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// serveConnect handles CONNECT host:port: judge, resolve and judge the
// addresses, and only then answer 200; peek the ClientHello and require its
// SNI to name the CONNECT host; then dial the judged address and splice.
// Everything refused before the 200 gets a readable 403; nothing is dialled
// for a refused tunnel.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	d := newDecision(&s.sink, clientAddr(r), modeTunnel)
	d.method = r.Method

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
	// Who asks, before anything is judged, resolved or dialled.
	id, den := s.identify(r)
	d.tenant = id.tenant
	if den == nil {
		den = s.admitTenant(d, id, true)
	}
	if den != nil {
		s.refuseConnect(w, d, den)
		return
	}
	adm, den := s.admit(r.Context(), id.policy, t, d)
	if den != nil {
		s.refuseConnect(w, d, den)
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
		d.finish()
		return
	}
	ss := s.newSession(client, d)
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		d.refuse(deny(CodeClientClosed, 0, t.host, "client went away before the tunnel opened"))
		ss.end()
		return
	}
	d.status = http.StatusOK
	if adm.verdict.Entry.RawPort(t.port) {
		var early []byte
		if n := buf.Reader.Buffered(); n > 0 {
			early, _ = buf.Reader.Peek(n)
		}
		s.openRaw(ss, early, t, adm)
		return
	}

	// The ClientHello: the client may have sent it right behind the CONNECT,
	// in which case the HTTP server's reader holds its first bytes.
	_ = client.SetReadDeadline(time.Now().Add(s.timeouts.ClientHello))
	var helloSrc io.Reader = client
	if buf.Reader.Buffered() > 0 {
		helloSrc = io.MultiReader(buf.Reader, client)
	}
	hello, helloBytes, err := peekClientHello(helloSrc)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		d.sendAlert(client, alertAccessDenied)
		d.refuse(deny(CodeProtocol, 0, t.host, "a tunnel must start with a TLS ClientHello: %v", helloErrReason(err)))
		ss.end()
		return
	}
	// Replay what the peek consumed, and anything still buffered behind it
	// (a client that sent more before our 200).
	if rest := buf.Reader.Buffered(); rest > 0 {
		more, _ := buf.Reader.Peek(rest)
		helloBytes = append(helloBytes, more...)
	}
	d.sni = hello.ServerName
	if den := checkSNI(t, hello.ServerName); den != nil {
		d.sendAlert(client, alertAccessDenied)
		d.refuse(den)
		ss.end()
		return
	}
	s.openTunnel(ss, helloBytes, t, adm)
}

// admission is what an allowed target carries into its tunnel: the
// verdict (with the entry it matched), the judged addresses, and the guard
// and timeouts of its policy and entry.
type admission struct {
	verdict  config.Verdict
	dest     Target
	guard    Guard
	timeouts Timeouts
}

// admit judges a target and the addresses it resolves to against the
// policy the client was identified with (the current generation's, or its
// tenant's in it). Explicit and transparent mode share it.
func (s *Server) admit(ctx context.Context, p *config.Policy, t target, d *decision) (admission, *denial) {
	g := s.guardFor(p, nil, s.timeoutsFor(p, nil))
	v, addrs, err := judge(ctx, p, t, d, g.lookup)
	d.entry = v.Pattern
	if err != nil {
		return admission{}, classifyUpstream(err, t.host)
	}
	tm := s.timeoutsFor(p, v.Entry)
	return admission{verdict: v, dest: Target{Host: t.host, Port: t.port, Addrs: addrs}, guard: s.guardFor(p, v.Entry, tm), timeouts: tm}, nil
}

// openTunnel finishes an admitted TLS connection whose ClientHello has been
// read (and checked against the target): a transform entry is intercepted,
// anything else is dialled and relayed opaquely. It takes over the session:
// the session ends when the tunnel does, possibly after openTunnel returns
// (a relay runs on goroutines of its own so that the goroutine which parsed
// the request, with its grown stack, can exit).
func (s *Server) openTunnel(ss *session, helloBytes []byte, t target, adm admission) {
	d := ss.d
	if e := adm.verdict.Entry; e.Transform != nil {
		// Intercepted requests outlive no context of ours: the session ends
		// when the client or Shutdown closes the connection.
		s.serveMITM(context.Background(), &replayConn{Conn: ss.client, replay: helloBytes}, t, adm.dest, e, adm.guard, adm.timeouts, d)
		ss.end()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adm.timeouts.Dial)
	upstream, err := adm.guard.Dial(ctx, adm.dest)
	cancel()
	if err != nil {
		// A failure, not a refusal: the alert must not read as a block.
		den := classifyUpstream(err, t.host)
		d.sendAlert(ss.client, alertFor(den))
		d.refuse(den)
		ss.end()
		return
	}
	d.setUpstream(upstream)
	if _, err := upstream.Write(helloBytes); err != nil {
		upstream.Close()
		d.refuse(classifyUpstream(err, t.host))
		ss.end()
		return
	}
	d.addIn(int64(len(helloBytes)))
	s.relay(ss, upstream, adm.timeouts.TunnelIdle)
}

// session owns a hijacked client connection from its 200 (or, in
// transparent mode, its accept) to its end: it is tracked for Shutdown,
// which http.Server.Shutdown cannot see, and end closes it, untracks it and
// writes the decision line, once.
type session struct {
	s       *Server
	client  net.Conn
	d       *decision
	once    sync.Once
	tunnel  atomic.Pointer[tunnel] // its relay, once it has one
	aborted atomic.Bool
}

func (s *Server) newSession(c net.Conn, d *decision) *session {
	ss := &session{s: s, client: c, d: d}
	s.tunnels.Add(1)
	s.track(ss)
	if s.sink.observer.Tunnel != nil {
		s.sink.observer.Tunnel(1)
	}
	return ss
}

// attach makes t the session's relay, which abort must close too.
func (ss *session) attach(t *tunnel) {
	ss.tunnel.Store(t)
	if ss.aborted.Load() {
		t.abort()
	}
}

// abort closes the session's connections from outside (Shutdown, when its
// wait is over), and the relay's upstream with them if it has one (now, or
// once attach gives it one): the relay's directions then end, parked ones
// included, and the last ends the session.
func (ss *session) abort() {
	ss.aborted.Store(true)
	_ = ss.client.Close()
	if t := ss.tunnel.Load(); t != nil {
		t.abort()
	}
}

func (ss *session) end() {
	ss.once.Do(func() {
		_ = ss.client.Close()
		ss.s.untrack(ss)
		ss.d.finish()
		if ss.s.sink.observer.Tunnel != nil {
			ss.s.sink.observer.Tunnel(-1)
		}
		ss.s.tunnels.Done()
	})
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

// refuseConnect answers a CONNECT before any 200, and closes the
// connection: whatever the client sent behind the CONNECT was meant for a
// tunnel and is never read as a request.
func (s *Server) refuseConnect(w http.ResponseWriter, d *decision, den *denial) {
	w.Header().Set("Connection", "close")
	d.answer(w, den)
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

func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := innermost(c).(closeWriter); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
