package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"

	"golang.org/x/net/http2"

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
func (s *Server) serveMITMH2(ctx context.Context, client *tls.Conn, upstream *tls.Conn, t target, dest Target, rules *config.Entry, tunnel *decision) {
	defer upstream.Close()
	cc, err := (&http2.Transport{}).NewClientConn(upstream)
	if err != nil {
		tunnel.refuse(classifyUpstream(err, t.host))
		return
	}
	defer cc.Close()
	h := &mitmHandler{s: s, t: t, dest: dest, admitted: injection{entry: rules, generation: tunnel.generation}, tunnel: tunnel, up: upstreamTripper{h2: cc, h2conn: upstream}}
	h.proxy = s.mitmProxy(h)
	srv := &http2.Server{IdleTimeout: s.timeouts.Idle, MaxUploadBufferPerStream: 1 << 20}
	var conn net.Conn = s.watch(client, tunnel)
	// The header limit of the HTTP/1.1 path (http2 reads it from the base
	// server's MaxHeaderBytes).
	base := &http.Server{MaxHeaderBytes: s.maxHdr}
	srv.ServeConn(conn, &http2.ServeConnOpts{Context: ctx, Handler: h, BaseConfig: base})
	h.active.Wait()
}
