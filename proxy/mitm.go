package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// serveMITM terminates the client's TLS with a leaf certificate for the
// allowed host, minted by our CA, and serves the HTTP/1.1 requests inside:
// each must name the tunnel's host (the credential is bound to the verified
// destination), gets the entry's headers injected, and goes to the upstream
// over TLS that verifies the real certificate, on the addresses the guard
// judged before the 200. Every request gets its own decision line; a tunnel
// that carries none (a failed handshake) gets one for itself.
//
// The inner requests are served by net/http's server and
// httputil.ReverseProxy rather than goproxy's MITM loop: we need the
// per-request host binding, the injection and the scrubbing in one place we
// control, and goproxy's loop would dial with its own transport.
func (s *Server) serveMITM(ctx context.Context, client net.Conn, t target, dest Target, rules *config.Entry, g Guard, tm Timeouts, tunnel *decision) {
	tunnel.mode = modeMITM
	tlsConfig := &tls.Config{
		ServerName: t.host,
		RootCAs:    s.roots,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}
	// h2 is offered to the client only when the upstream speaks it: the
	// probe dials the upstream during the client's handshake.
	probe := &h2Probe{s: s, g: g, dest: dest, tlsConfig: tlsConfig, tm: tm}
	clientConfig := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.leaves.Get(t.host)
		},
	}
	clientConfig.GetConfigForClient = probe.configFor(clientConfig)
	tlsConn := tls.Server(client, clientConfig)
	hsCtx, cancel := context.WithTimeout(ctx, s.timeouts.ClientHello+tm.Dial+tm.TLSHandshake)
	err := tlsConn.HandshakeContext(hsCtx)
	cancel()
	if err != nil {
		probe.close()
		tunnel.refuse(deny(CodeProtocol, 0, t.host, "TLS handshake with the client failed (does the sandbox trust the gateway's CA?): %v", err))
		return
	}
	if tlsConn.ConnectionState().NegotiatedProtocol == "h2" && probe.conn != nil {
		s.serveMITMH2(ctx, tlsConn, probe.conn, t, dest, rules, tm.ResponseHeader, tunnel)
		return
	}
	probe.close()
	// The tunnel's requests go over one keep-alive TLS connection (its
	// slot), dialled to the judged addresses, never a fresh lookup of the
	// name, with the real certificate verified before a byte of any
	// request is sent.
	up := upstreamTripper{slot: &upstreamSlot{}, key: net.JoinHostPort(t.host, strconv.Itoa(int(t.port))), policy: g.Policy, responseHeader: tm.ResponseHeader}
	up.dial = func(ctx context.Context) (net.Conn, error) {
		conn, err := g.Dial(ctx, dest)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(conn, tlsConfig)
		hsCtx, cancel := context.WithTimeout(ctx, tm.TLSHandshake)
		defer cancel()
		if err := tc.HandshakeContext(hsCtx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
	// Upgrades and 100-continue go through a transport made for them.
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return g.Dial(ctx, dest) },
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   tm.TLSHandshake,
		ResponseHeaderTimeout: tm.ResponseHeader,
		IdleConnTimeout:       s.timeouts.Idle,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	up.transport = transport
	defer func() {
		up.slot.drop()
		transport.CloseIdleConnections()
	}()

	// The explicit listener's framing check, on the decrypted stream.
	fc := newFramingConn(s.watch(tlsConn, tunnel), s.maxHdr)
	h := s.newMITMHandler(t, dest, rules, tunnel, up)
	h.framing = fc
	h.proxy = s.mitmProxy(h)
	s.serveHTTPConn(fc, h)
	// A hijacked connection (a websocket upgrade) ends Serve while its
	// handler still relays; the tunnel lasts until every handler is done.
	h.active.Wait()
}

// mitmHandler serves the requests inside one intercepted tunnel.
type mitmHandler struct {
	s         *Server
	t         target
	authority string // t as the requests' Host, made once per tunnel
	dest      Target // the judged addresses, the only ones dialled
	// admitted is the entry the tunnel was admitted with, and its
	// policy's generation; latest what the last request was injected
	// with (nil: admitted). See currentEntry.
	admitted injection
	latest   atomic.Pointer[injection]
	// tunnel is the decision of the tunnel the requests arrive in: their
	// lines carry its identity, and the first request takes its line
	// over (handOff).
	tunnel  *decision
	framing *framingConn
	up      upstreamTripper // the tunnel's, shared by its requests in turn
	proxy   *httputil.ReverseProxy
	active  sync.WaitGroup
}

// newMITMHandler is the handler of the requests of one intercepted tunnel,
// sent upstream by up.
func (s *Server) newMITMHandler(t target, dest Target, rules *config.Entry, tunnel *decision, up upstreamTripper) *mitmHandler {
	return &mitmHandler{s: s, t: t, authority: t.authority(443), dest: dest,
		admitted: injection{entry: rules, generation: tunnel.generation}, tunnel: tunnel, up: up}
}

func (h *mitmHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.active.Add(1)
	defer h.active.Done()
	// The tunnel became requests: each has its own line from now on.
	h.tunnel.handOff()
	d := newDecision(&h.s.sink, h.tunnel.client, modeMITM)
	d.tenant = h.tunnel.tenant
	d.method, d.host, d.port, d.entry, d.sni = r.Method, h.t.host, h.t.port, h.tunnel.entry, h.tunnel.sni
	d.transparent = h.tunnel.transparent
	if a := h.tunnel.account; a != nil {
		// Each request inside a tunnel counts against the tenant's rate and
		// volume; the tunnel holds its connection.
		if den := h.s.admitTenant(d, identity{tenant: a.tenant, limits: a.limits}, false); den != nil {
			d.answer(w, den)
			return
		}
	}
	inj := h.currentEntry()
	d.generation = inj.generation
	ex := &exchange{d: d, host: h.t.host, entry: inj.entry, scrub: inj.entry.Transform.Scrubber(), up: h.up}
	den := h.framing.refusalFor(r)
	if den == nil {
		den = h.checkHost(r)
	}
	if den == nil {
		den = ex.applyScope(r.Method, r.URL)
	}
	if den == nil {
		den = h.s.fetchCredential(ex)
	}
	if den == nil {
		den = ex.hashBody(r)
	}
	if den != nil {
		d.answer(w, den)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		if headerHasToken(r.Header, "Expect", "100-continue") {
			// net/http's server writes its own "100 Continue" on the first
			// read of the body, from the goroutine that sends the request
			// upstream, without a lock against ReverseProxy relaying the
			// upstream's informational answers (103) from another: say it
			// now. The body is sent on at once anyway (the transport does
			// not wait for the upstream's 100).
			w.WriteHeader(http.StatusContinue)
		}
		r.Body = &countingBody{ReadCloser: r.Body, add: d.addIn}
	}
	h.proxy.ServeHTTP(w, withExchange(r, ex))
	if ex.switched != nil {
		// A switched connection's line is written when ReverseProxy closes
		// it, just after it returns: the request lasts as long as the
		// connection, and its bytes are all counted by then.
		<-ex.switched
	}
	// ReverseProxy has closed the upstream body (which logs) or answered an
	// error (which logs); this covers a handler that returned without either.
	d.finish()
}

// mitmProxy is the ReverseProxy of an intercepted tunnel's handler.
func (s *Server) mitmProxy(h *mitmHandler) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      exchangeTransport{},
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.upstreamError,
		ErrorLog:       s.stdLogger(),
		BufferPool:     (*relayBufPool)(s),
	}
}

// checkHost binds the credential to the verified destination: the Host
// header, and the host of an absolute-form target, must name the tunnel's
// host and port (a missing port means 443).
func (h *mitmHandler) checkHost(r *http.Request) *denial {
	names := []string{r.Host}
	if r.URL.IsAbs() {
		names = append(names, r.URL.Host)
		if r.URL.Scheme != "https" {
			return deny(CodeHostMismatch, http.StatusForbidden, h.t.host, "scheme %q inside a TLS tunnel", r.URL.Scheme)
		}
	}
	for _, hp := range names {
		host, port := splitHostPortDefault(hp, "443")
		got, _, err := allowlist.NormalizeHost(host)
		p, ok := parsePort(port)
		if err != nil || !ok || got != h.t.host || p != h.t.port {
			return deny(CodeHostMismatch, http.StatusForbidden, h.t.host,
				"request for %q inside a tunnel to %s; credentials go only to the host the tunnel was opened to", hp, net.JoinHostPort(h.t.host, strconv.Itoa(int(h.t.port))))
		}
	}
	return nil
}

// splitHostPortDefault splits host[:port], tolerating a missing port.
func splitHostPortDefault(hp, defaultPort string) (string, string) {
	if host, port, err := net.SplitHostPort(hp); err == nil {
		return host, port
	}
	if len(hp) > 1 && hp[0] == '[' && hp[len(hp)-1] == ']' {
		return hp[1 : len(hp)-1], defaultPort
	}
	return hp, defaultPort
}

// rewrite routes a request to the tunnel's host and prepares it (see
// exchange). One without an exchange is left unrouted; the round-tripper
// refuses it.
func (h *mitmHandler) rewrite(pr *httputil.ProxyRequest) {
	ex, ok := exchangeOf(pr.In)
	if !ok {
		return
	}
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = h.authority
	pr.Out.Host = pr.Out.URL.Host
	// A WebSocket upgrade goes through (and is what ReverseProxy compares
	// a 101 answer with); ReverseProxy took it out of Out already.
	ex.prepare(pr.Out.URL, pr.Out.Header, isWebSocketUpgrade(pr.In.Header))
	if den := ex.sign(pr.Out); den != nil {
		ex.failed = den
	}
}

func (h *mitmHandler) modifyResponse(resp *http.Response) error {
	ex, ok := exchangeOf(resp.Request)
	if !ok {
		return errUnjudged
	}
	if err := ex.receive(resp); err != nil {
		return err // ReverseProxy closes the body and calls upstreamError
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		ex.switched = make(chan struct{})
		resp.Body = &closeSignal{ReadWriteCloser: rwc, done: ex.switched}
		ex.conn = resp.Body
	}
	return nil
}

// closeSignal closes done when the connection it wraps is closed.
type closeSignal struct {
	io.ReadWriteCloser
	once sync.Once
	done chan struct{}
}

func (c *closeSignal) Close() error {
	err := c.ReadWriteCloser.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

func (h *mitmHandler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	ex, ok := exchangeOf(r)
	if !ok {
		// Never: ServeHTTP gave every request its exchange.
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	d := ex.d
	if ex.conn != nil {
		// ReverseProxy refused a switched connection before taking it
		// over; close it here, or the request would wait for it forever.
		_ = ex.conn.Close()
	}
	den := ex.failure(err, r)
	d.refuse(den)
	if den.status != 0 {
		den.write(w)
	}
	d.finish()
}

// serveHTTPConn serves the HTTP/1.1 requests of one connection that is
// already ours (inside an intercepted tunnel, or redirected to the
// transparent listener) with net/http's server and our limits, and returns
// when the connection is closed.
func (s *Server) serveHTTPConn(c net.Conn, h http.Handler) {
	inner := s.newHTTPServer(h)
	ln := newOneConnListener(c)
	serverState := inner.ConnState
	inner.ConnState = func(c net.Conn, st http.ConnState) {
		serverState(c, st)
		ln.connState(c, st)
	}
	_ = inner.Serve(ln)
}

// oneConnListener hands one connection to an http.Server and then blocks
// Accept until that connection is closed, so Serve returns exactly when the
// tunnel is over.
type oneConnListener struct {
	conn net.Conn
	once sync.Once
	done chan struct{}
	ch   chan net.Conn
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{conn: c, done: make(chan struct{}), ch: make(chan net.Conn, 1)}
	l.ch <- c
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) connState(_ net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		l.Close()
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
