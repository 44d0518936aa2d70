package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hookgate/hookgate/config"
)

// h2Probe decides, during the client's TLS handshake, whether an
// intercepted tunnel speaks HTTP/2: only when the client offers h2 and the
// upstream, dialled then through the guard to the judged addresses, picks
// it. conn is that upstream connection (verified TLS, h2), kept for the
// tunnel's requests; nil otherwise.
type h2Probe struct {
	s         *Server
	g         Guard
	dest      Target
	tlsConfig *tls.Config // the upstream's, HTTP/1.1 only
	tm        Timeouts
	conn      *tls.Conn
}

// configFor is the client side's GetConfigForClient: base, with h2 offered
// when the probe found an h2 upstream.
func (p *h2Probe) configFor(base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	return func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		if !slices.Contains(hi.SupportedProtos, "h2") || !p.dialH2(hi.Context()) {
			return nil, nil // base as it is: HTTP/1.1
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.NextProtos = []string{"h2", "http/1.1"}
		return c, nil
	}
}

// dialH2 dials the upstream offering h2 and reports whether it chose it.
func (p *h2Probe) dialH2(ctx context.Context) bool {
	dctx, cancel := context.WithTimeout(ctx, p.tm.Dial+p.tm.TLSHandshake)
	defer cancel()
	raw, err := p.g.Dial(dctx, p.dest)
	if err != nil {
		return false // the tunnel's requests will say why, over HTTP/1.1
	}
	cfg := p.tlsConfig.Clone()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(dctx); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		_ = raw.Close()
		return false
	}
	p.conn = tc
	return true
}

func (p *h2Probe) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// serveMITMH2 serves the HTTP/2 requests of an intercepted tunnel whose
// client and upstream both chose h2: each request takes the same steps as
// over HTTP/1.1 (host binding, scope, injection, scrubbing, one decision
// line) and goes upstream as a stream of the tunnel's one h2 connection.
// responseHeader bounds the wait for each response's header, as it does
// over HTTP/1.1.
func (s *Server) serveMITMH2(ctx context.Context, client *tls.Conn, upstream *tls.Conn, t target, dest Target, rules *config.Entry, responseHeader time.Duration, tunnel *decision) {
	defer upstream.Close()
	cc, err := newH2ClientConn(ctx, upstream, t, responseHeader)
	if err != nil {
		tunnel.refuse(classifyUpstream(err, t.host))
		return
	}
	defer cc.Close()
	h := s.newMITMHandler(t, dest, rules, tunnel, upstreamTripper{h2: cc, h2conn: upstream})
	h.proxy = s.mitmProxy(h)
	srv := s.newH2Server(ctx, h)
	// net/http serves h2 only on a *tls.Conn itself (it reads the
	// negotiated protocol from it), so the client connection is served
	// as it is; the listener ends Serve when that connection closes.
	ln := newOneConnListener(client)
	srv.ConnState = ln.connState
	_ = srv.Serve(ln)
	h.active.Wait()
}

// newH2Server is the HTTP/2-only server of one intercepted tunnel: the
// header limit and idle timeout of the HTTP/1.1 path, a 1 MiB receive
// window per stream, and ctx as the parent of every request's context.
func (s *Server) newH2Server(ctx context.Context, h http.Handler) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	return &http.Server{
		Handler:        h,
		Protocols:      &protocols,
		HTTP2:          &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 20},
		IdleTimeout:    s.timeouts.Idle,
		MaxHeaderBytes: s.maxHdr,
		ErrorLog:       s.stdLogger(),
		BaseContext:    func(net.Listener) context.Context { return ctx },
	}
}

// newH2ClientConn makes the tunnel's HTTP/2 client connection over
// upstream, the TLS connection the probe dialled (through the guard) and on
// which the upstream chose h2: the transport's TLS dialer hands out that
// connection, once, so nothing else is ever dialled.
func newH2ClientConn(ctx context.Context, upstream *tls.Conn, t target, responseHeader time.Duration) (*http.ClientConn, error) {
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	var dialled atomic.Bool
	tr := &http.Transport{
		Protocols:             &protocols,
		ResponseHeaderTimeout: responseHeader,
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			if dialled.Swap(true) {
				return nil, errors.New("the tunnel's upstream connection is already in use")
			}
			return upstream, nil
		},
	}
	return tr.NewClientConn(ctx, "https", net.JoinHostPort(t.host, strconv.Itoa(int(t.port))))
}
