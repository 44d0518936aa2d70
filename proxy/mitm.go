package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/transform"
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
func (s *Server) serveMITM(ctx context.Context, client net.Conn, t target, dest Target, rules EntryRules, g Guard, tm Timeouts, tunnel *decision) {
	tunnel.mode = modeMITM
	tlsConn := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"}, // never h2: one request path, ours
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.leaves.Get(t.host)
		},
	})
	hsCtx, cancel := context.WithTimeout(ctx, s.timeouts.ClientHello)
	err := tlsConn.HandshakeContext(hsCtx)
	cancel()
	if err != nil {
		tunnel.refuse(deny(CodeProtocol, 0, t.host, "TLS handshake with the client failed (does the sandbox trust the gateway's CA?): %v", err))
		return
	}

	tlsConfig := &tls.Config{
		ServerName: t.host,
		RootCAs:    s.roots,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}
	up := &tunnelTransport{s: s, key: net.JoinHostPort(t.host, strconv.Itoa(int(t.port))), responseHeader: tm.ResponseHeader, scrub: rules.Transform.Scrubber()}
	// The judged addresses, never a fresh lookup of the name; the real
	// certificate verified before a byte of any request is sent.
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
	up.fallback = &http.Transport{
		Proxy:                 nil,
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return g.Dial(ctx, dest) },
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   tm.TLSHandshake,
		ResponseHeaderTimeout: tm.ResponseHeader,
		IdleConnTimeout:       s.timeouts.Idle,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	defer up.close()

	// The explicit listener's framing check, on the decrypted stream.
	fc := newFramingConn(s.watch(tlsConn, tunnel), s.maxHdr)
	h := &mitmHandler{s: s, t: t, rules: rules, generation: tunnel.generation, client: tunnel.client, entry: tunnel.entry, sni: tunnel.sni, transparent: tunnel.transparent, framing: fc}
	h.proxy = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      up,
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.upstreamError,
		ErrorLog:       s.stdLogger(),
		BufferPool:     (*relayBufPool)(s),
	}
	s.serveHTTPConn(fc, h)
	// A hijacked connection (a websocket upgrade) ends Serve while its
	// handler still relays; the tunnel lasts until every handler is done.
	h.active.Wait()
	if h.requests.Load() > 0 {
		tunnel.once.Do(func() {}) // its requests had their own lines
	}
}

// tunnelTransport sends the requests of one intercepted tunnel to its
// upstream over one keep-alive TLS connection (see upstreamSlot).
type tunnelTransport struct {
	s              *Server
	key            string
	responseHeader time.Duration
	dial           func(context.Context) (net.Conn, error)
	slot           upstreamSlot
	fallback       *http.Transport
	scrub          *transform.Scrubber // nil: no secret is injected
}

func (tt *tunnelTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	mr, _ := r.Context().Value(mitmRequestKey{}).(*mitmRequest)
	if mr == nil {
		return tt.fallback.RoundTrip(scrubRequestContext(r, tt.scrub))
	}
	if r.Header.Get("Upgrade") != "" || r.Header.Get("Expect") != "" {
		// Only this transport passes informational answers on (through
		// httputil.ReverseProxy's trace): they are scrubbed first.
		r = scrubRequestContext(r, mr.transform.Scrubber())
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { mr.d.setUpstream(info.Conn) },
		}))
		return tt.fallback.RoundTrip(r)
	}
	return tt.s.roundTripSlot(&tt.slot, tt.key, nil, tt.dial, tt.responseHeader, r, mr.d)
}

// scrubRequestContext makes the 1xx answers to r scrubbed.
func scrubRequestContext(r *http.Request, s *transform.Scrubber) *http.Request {
	if s == nil {
		return r
	}
	return r.WithContext(scrubInformational(r.Context(), s))
}

func (tt *tunnelTransport) close() {
	tt.slot.drop()
	tt.fallback.CloseIdleConnections()
}

// mitmHandler serves the requests inside one intercepted tunnel.
type mitmHandler struct {
	s           *Server
	t           target
	rules       EntryRules
	client      string
	entry       string
	sni         string
	transparent bool
	framing     *framingConn
	proxy       *httputil.ReverseProxy
	requests    atomic.Int64
	active      sync.WaitGroup
	// latest is what the last request was injected with (nil: rules, of
	// the tunnel's own generation); see currentTransform.
	latest     atomic.Pointer[injection]
	generation uint64 // of the policy that admitted the tunnel
}

// mitmRequest is the state of one request inside an intercepted tunnel,
// carried in its context from ServeHTTP through the proxy's hooks.
type mitmRequest struct {
	d *decision
	// switched is closed when the connection of an accepted 101 Switching
	// Protocols answer is closed, which writes the decision line; nil
	// until then.
	switched chan struct{}
	conn     io.Closer // that connection
	// transform is what this request gets injected and scrubbed with
	// (see currentTransform).
	transform *transform.Rules
}

type mitmRequestKey struct{}

func mitmRequestOf(r *http.Request) *mitmRequest {
	return r.Context().Value(mitmRequestKey{}).(*mitmRequest)
}

func (h *mitmHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	h.active.Add(1)
	defer h.active.Done()
	d := newDecision(h.client, modeMITM)
	d.method, d.host, d.port, d.entry, d.sni = r.Method, h.t.host, h.t.port, h.entry, h.sni
	d.transparent = h.transparent
	den := h.framing.refusalFor(r)
	if den == nil {
		den = h.checkHost(r)
	}
	if den != nil {
		d.refuse(den)
		den.write(w)
		d.log(&h.s.sink)
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
	inj := h.currentTransform()
	d.generation = inj.generation
	mr := &mitmRequest{d: d, transform: inj.rules}
	h.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mitmRequestKey{}, mr)))
	if mr.switched != nil {
		// A switched connection's line is written when ReverseProxy closes
		// it, just after it returns: the request lasts as long as the
		// connection, and its bytes are all counted by then.
		<-mr.switched
	}
	// ReverseProxy has closed the upstream body (which logs) or answered an
	// error (which logs); this covers a handler that returned without either.
	d.log(&h.s.sink)
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

func (h *mitmHandler) rewrite(pr *httputil.ProxyRequest) {
	mr := mitmRequestOf(pr.In)
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = h.t.authority(443)
	pr.Out.Host = pr.Out.URL.Host
	inject(pr.Out.Header, mr.transform, mr.d)
	// inject strips every upgrade; a WebSocket one goes through (and is
	// what ReverseProxy compares a 101 answer with).
	if isWebSocketUpgrade(pr.In.Header) {
		setWebSocketUpgrade(pr.Out.Header)
	}
}

func (h *mitmHandler) modifyResponse(resp *http.Response) error {
	mr := mitmRequestOf(resp.Request)
	mr.d.status = resp.StatusCode
	scrubResponse(resp, mr.transform.Scrubber())
	if err := checkSwitch(resp.Request, resp, h.t.host); err != nil {
		return err // ReverseProxy closes the body and calls upstreamError
	}
	resp.Body = wrapLoggingBody(resp.Body, mr.d, &h.s.sink)
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		mr.switched = make(chan struct{})
		resp.Body = &closeSignal{ReadWriteCloser: rwc, done: mr.switched}
		mr.conn = resp.Body
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
	mr := mitmRequestOf(r)
	d := mr.d
	if mr.conn != nil {
		// ReverseProxy refused a switched connection before taking it
		// over; close it here, or the request would wait for it forever.
		_ = mr.conn.Close()
	}
	den := scrubDenial(requestFailure(err, r, h.t.host), mr.transform.Scrubber())
	d.refuse(den)
	if den.status != 0 {
		den.write(w)
	}
	d.log(&h.s.sink)
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
