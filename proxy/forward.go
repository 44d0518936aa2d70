package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/elazarl/goproxy"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// newForwarder configures goproxy for plain-HTTP forwarding. Every default
// that could bypass us is replaced: our transport (our guard, verified TLS,
// no proxy from the environment), no goproxy CA, no HTTP/2 passthrough.
// CONNECT never reaches it (ServeHTTP takes CONNECT first).
func (s *Server) newForwarder() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = s.transport
	gp.ConnectDial = nil // NewProxyHttpServer reads HTTPS_PROXY into this
	gp.ConnectDialWithReq = nil
	gp.AllowHTTP2 = false
	gp.Verbose = false
	gp.Logger = s.stdLogger()
	gp.KeepAcceptEncoding = true
	gp.NonproxyHandler = http.HandlerFunc(s.serveNonProxy)
	gp.OnRequest().DoFunc(s.onRequest)
	gp.OnResponse().DoFunc(s.onResponse)
	return gp
}

// serveNonProxy answers origin-form requests ("GET / HTTP/1.1" sent to the
// proxy port as if it were a web server), including the stand-in for a
// header block the framing check refused.
func (s *Server) serveNonProxy(w http.ResponseWriter, r *http.Request) {
	d := newDecision(&s.sink, clientAddr(r), modeHTTP)
	d.method = r.Method
	den := badRequest("", "not a proxy request: send absolute-form requests (http://host/path) or CONNECT; set HTTP_PROXY/HTTPS_PROXY to this gateway")
	if fc, ok := r.Context().Value(connKey{}).(*framingConn); ok {
		if refused := fc.refusalFor(r); refused != nil {
			den = refused
		}
	}
	d.answer(w, den)
}

// onRequest judges an absolute-form request and prepares it (see
// exchange). A non-nil response refuses it; goproxy then skips the
// upstream and answers with it.
func (s *Server) onRequest(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	d := newDecision(&s.sink, clientAddr(r), modeHTTP)
	d.method = r.Method
	d.transparent, _ = r.Context().Value(transparentKey{}).(bool)
	ex := &exchange{d: d, bufs: &s.bufs}
	ctx.UserData = ex
	ctx.RoundTripper = forwardTripper{}

	var defaultPort uint16
	switch strings.ToLower(r.URL.Scheme) {
	case "http":
		defaultPort = 80
	case "https":
		defaultPort = 443
	default:
		return r, s.refuse(r, d, badRequest(r.URL.Host, "the scheme is not proxied; only http and https are"))
	}
	t, den := parseTarget(r.URL.Hostname(), r.URL.Port(), defaultPort)
	d.host, d.port = t.host, t.port
	ex.host = t.host
	if den != nil {
		return r, s.refuse(r, d, den)
	}
	// Who asks, before anything is judged, resolved or dialled: the
	// tenant's policy is the one the name is judged by.
	id, den := s.identify(r)
	d.tenant = id.tenant
	if den == nil {
		den = s.admitTenant(d, id, true)
	}
	if den != nil {
		return r, s.refuse(r, d, den)
	}
	// The name now; a name's addresses when it is dialled (the guard).
	p := id.policy
	v, _, err := judge(r.Context(), p, t, d, nil)
	d.entry = v.Pattern
	if err != nil {
		return r, s.refuse(r, d, classifyUpstream(err, t.host))
	}
	ex.entry = v.Entry
	ex.timeouts = s.timeoutsFor(p, v.Entry)
	ex.guard = s.guardFor(p, v.Entry, ex.timeouts)

	// Route by the request target only: the upstream sees Host = the target
	// authority whatever the client put in its Host header (RFC 9112 §3.2.2),
	// and no userinfo.
	r.URL.Scheme = strings.ToLower(r.URL.Scheme)
	if ex.entry.Transform != nil && r.URL.Scheme == "http" && !ex.entry.AllowPlaintext {
		return r, s.refuse(r, d, deny(CodePlaintextCredential, http.StatusForbidden, t.host,
			"%s gets credentials injected, which travel only over HTTPS; use https://, or set allow_plaintext on the entry", t.host))
	}
	if den := ex.applyScope(r.Method, r.URL); den != nil {
		return r, s.refuse(r, d, den)
	}
	if den := s.fetchCredential(ex); den != nil {
		return r, s.refuse(r, d, den)
	}
	if den := ex.hashBody(r); den != nil {
		return r, s.refuse(r, d, den)
	}
	r.URL.User = nil
	r.URL.Host = t.authority(defaultPort)
	r.Host = r.URL.Host
	ex.prepare(r.URL, r.Header, isWebSocketUpgrade(r.Header))
	if den := ex.sign(r); den != nil {
		return r, s.refuse(r, d, den)
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, add: d.addIn}
	}
	s.forwardUpstream(r, p, ex)
	return r, nil
}

// forwardUpstream sets the upstream of a forwarded request: the
// forwarding transport for its timeouts, dialling through the guard of its
// policy and entry; and for plain HTTP on a connection of the explicit
// listener, that connection's own upstream connection first (see
// upstreamSlot).
func (s *Server) forwardUpstream(r *http.Request, p *config.Policy, ex *exchange) {
	ex.up = upstreamTripper{transport: s.transports.get(ex.timeouts, ex.d.tenant)}
	fc, ok := r.Context().Value(connKey{}).(*framingConn)
	if !ok || r.URL.Scheme != "http" {
		return
	}
	addr := r.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(trimBrackets(addr), "80")
	}
	up := &ex.up
	up.slot, up.key, up.policy, up.responseHeader = &fc.upstream, addr, p, ex.timeouts.ResponseHeader
	up.guard = &ex.guard
}

// exchangeOfCtx returns the exchange onRequest left for goproxy's later
// hooks; false if there is none (goproxy failed before onRequest ran).
func exchangeOfCtx(ctx *goproxy.ProxyCtx) (*exchange, bool) {
	ex, ok := ctx.UserData.(*exchange)
	return ex, ok
}

// refuse answers a request with a denial and records it.
func (s *Server) refuse(r *http.Request, d *decision, den *denial) *http.Response {
	d.refuse(den)
	resp := den.response(r)
	resp.Body = &loggingBody{ReadCloser: resp.Body, d: d}
	return resp
}

// forwardTripper is goproxy's round-tripper: each request goes the way of
// the exchange onRequest left in its ProxyCtx. (An empty struct, so that
// setting it on each request allocates nothing, as a method value would.)
type forwardTripper struct{}

func (forwardTripper) RoundTrip(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Response, error) {
	ex, ok := exchangeOfCtx(ctx)
	if !ok {
		return nil, errUnjudged
	}
	resp, err := ex.up.roundTrip(r, ex)
	if err != nil {
		return nil, err
	}
	if err := ex.receive(resp); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		client, _ := r.Context().Value(connKey{}).(net.Conn)
		resp.Body = &switchedBody{ReadWriteCloser: rwc, client: client}
	}
	return resp, nil
}

// switchedBody is the upstream side of a switched (WebSocket) connection on
// the forwarding path. goproxy relays until one direction ends and then
// closes this body but not the client's connection, which it has taken over:
// closing it here tells the client, and ends the other direction.
type switchedBody struct {
	io.ReadWriteCloser
	client net.Conn // nil if unknown
}

func (b *switchedBody) Close() error {
	err := b.ReadWriteCloser.Close()
	if b.client != nil {
		_ = b.client.Close()
	}
	return err
}

// onResponse turns an upstream failure into our answer. Successful responses
// pass through untouched (their body already logs the decision).
func (s *Server) onResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	if resp != nil {
		return resp
	}
	ex, ok := exchangeOfCtx(ctx)
	if !ok {
		ex = &exchange{d: newDecision(&s.sink, clientAddr(ctx.Req), modeHTTP)}
	}
	den := ex.failure(ctx.Error, ctx.Req)
	if den.status == 0 {
		// The client went away: the line says so (status 0), but goproxy
		// still needs a response to write, into the void.
		ex.d.refuse(den)
		den = scrubDenial(classifyUpstream(ctx.Error, ex.host), ex.scrub)
	}
	return s.refuse(ctx.Req, ex.d, den)
}

// scrubDenial keeps an echoed secret out of a refusal whose reason quotes
// the upstream (net/http quotes a malformed response line, for one).
func scrubDenial(den *denial, s *transform.Scrubber) *denial {
	if r := s.Replace(den.reason); r != den.reason {
		c := *den
		c.reason = r
		return &c
	}
	return den
}

// isWebSocketUpgrade reports whether a request asks to switch to the
// WebSocket protocol: the one upgrade the gateway lets through. Any other
// (h2c, TLS/1.0) is dropped with the hop-by-hop headers, so the upstream
// answers in HTTP/1.1 as if none had been asked for.
func isWebSocketUpgrade(h http.Header) bool {
	return headerHasToken(h, "Connection", "upgrade") && headerHasToken(h, "Upgrade", "websocket")
}

// setWebSocketUpgrade puts back, after the hop-by-hop headers were
// stripped, the two that ask for a WebSocket upgrade.
func setWebSocketUpgrade(h http.Header) {
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
}

// checkSwitch refuses a 101 Switching Protocols answer unless the request
// asked for a WebSocket upgrade and the answer is one: an upstream must not
// turn a request into a connection of another protocol the gateway cannot
// see into. Call it after scrubResponse, as the reason quotes the answer.
func checkSwitch(req *http.Request, resp *http.Response, host string) error {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	if isWebSocketUpgrade(req.Header) && isWebSocketUpgrade(resp.Header) {
		if _, ok := resp.Body.(io.ReadWriteCloser); ok {
			return nil
		}
	}
	return deny(CodeUpstreamError, http.StatusBadGateway, host,
		"the upstream switched protocols to %q, which was not asked for; only websocket upgrades are let through", resp.Header.Get("Upgrade"))
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h[name] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// countingBody counts the bytes read through it.
type countingBody struct {
	io.ReadCloser
	add func(int64)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.add(int64(n))
	return n, err
}
