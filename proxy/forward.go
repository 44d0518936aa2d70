package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"

	"github.com/elazarl/goproxy"

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
	d := newDecision(clientAddr(r), modeHTTP)
	d.method = r.Method
	den := badRequest("", "not a proxy request: send absolute-form requests (http://host/path) or CONNECT; set HTTP_PROXY/HTTPS_PROXY to this gateway")
	if fc, ok := r.Context().Value(connKey{}).(*framingConn); ok {
		if refused := fc.refusalFor(r); refused != nil {
			den = refused
		}
	}
	d.refuse(den)
	den.write(w)
	d.log(&s.sink)
}

// onRequest judges an absolute-form request. A non-nil response refuses it;
// goproxy then skips the upstream and answers with it.
func (s *Server) onRequest(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	d := newDecision(clientAddr(r), modeHTTP)
	d.method = r.Method
	d.transparent, _ = r.Context().Value(transparentKey{}).(bool)
	st := &forwardState{d: d}
	ctx.UserData = st
	ctx.RoundTripper = goproxy.RoundTripperFunc(s.roundTrip)

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
	if den != nil {
		return r, s.refuse(r, d, den)
	}
	p := s.policy.Load()
	v, den := judgeFor(p, t, d)
	if v.Allowed {
		d.entry = v.Entry.Domain
	}
	if den != nil {
		return r, s.refuse(r, d, den)
	}

	rules := p.rules(v)
	st.timeouts = s.timeoutsFor(p, rules)
	// Route by the request target only: the upstream sees Host = the target
	// authority whatever the client put in its Host header (RFC 9112 §3.2.2),
	// and no userinfo.
	r.URL.Scheme = strings.ToLower(r.URL.Scheme)
	if rules.Transform != nil && r.URL.Scheme == "http" && !rules.AllowPlaintext {
		return r, s.refuse(r, d, deny(CodePlaintextCredential, http.StatusForbidden, t.host,
			"%s gets credentials injected, which travel only over HTTPS; use https://, or set allow_plaintext on the entry", t.host))
	}
	r.URL.User = nil
	r.URL.Host = t.authority(defaultPort)
	r.Host = r.URL.Host
	ws := isWebSocketUpgrade(r.Header)
	transform.StripHopByHop(r.Header)
	if _, ok := r.Header["User-Agent"]; !ok {
		// An empty value keeps net/http from sending its own User-Agent.
		r.Header["User-Agent"] = []string{""}
	}
	if rules.Transform != nil {
		inject(r.Header, rules.Transform, d)
		st.scrub = rules.Transform.Scrubber()
	}
	if ws {
		setWebSocketUpgrade(r.Header)
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, add: d.addIn}
	}
	rctx := context.WithValue(r.Context(), policyKey{}, p)
	if len(rules.Addresses) > 0 {
		rctx = context.WithValue(rctx, pinsKey{}, rules.Addresses)
	}
	return r.WithContext(rctx), nil
}

// forwardState is what a forwarded request carries from onRequest to its
// response (goproxy's ctx.UserData).
type forwardState struct {
	d        *decision
	scrub    *transform.Scrubber // nil: no secrets were injected
	timeouts Timeouts            // of the entry and policy it was judged by
}

// refuse answers a request with a denial and records it.
func (s *Server) refuse(r *http.Request, d *decision, den *denial) *http.Response {
	d.refuse(den)
	resp := den.response(r)
	resp.Body = &loggingBody{ReadCloser: resp.Body, d: d, sink: &s.sink}
	return resp
}

// roundTrip sends an allowed request upstream and ties the decision line to
// the end of the response body, where the request really ends.
func (s *Server) roundTrip(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Response, error) {
	st := ctx.UserData.(*forwardState)
	var (
		resp *http.Response
		err  error
	)
	if fc, ok := directEligible(r); ok {
		resp, err = s.roundTripDirect(fc, r, st.timeouts.ResponseHeader, st.d)
	} else {
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { st.d.setUpstream(info.Conn) },
		}))
		resp, err = s.transports.get(st.timeouts).RoundTrip(r)
	}
	if err != nil {
		return nil, err
	}
	st.d.status = resp.StatusCode
	scrubResponse(resp, st.scrub)
	if err := checkSwitch(r, resp, st.d.host); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	resp.Body = wrapLoggingBody(resp.Body, st.d, &s.sink)
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
	st, _ := ctx.UserData.(*forwardState)
	if st == nil {
		st = &forwardState{d: newDecision(clientAddr(ctx.Req), modeHTTP)}
	}
	den := scrubDenial(requestFailure(ctx.Error, ctx.Req, st.d.host), st.scrub)
	if den.status == 0 {
		// The client went away: the line says so (status 0), but goproxy
		// still needs a response to write, into the void.
		st.d.refuse(den)
		den = scrubDenial(classifyUpstream(ctx.Error, st.d.host), st.scrub)
	}
	return s.refuse(ctx.Req, st.d, den)
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
