package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"time"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// exchange is one HTTP request on its way to an upstream, whichever way it
// came in: an absolute-form request on the explicit listener, a plain-HTTP
// request of a redirected connection (transparent), or a request inside an
// intercepted tunnel. Every kind takes the same steps, in this order:
//
//	judge (the name; every address again on every dial, by the guard)
//	→ prepare (strip hop-by-hop, inject the entry's headers)
//	→ upstreamTripper.roundTrip (the one round-tripper)
//	→ receive (scrub, refuse unasked protocol switches)
//	→ one decision line, written when the response body is closed
//
// goproxy (plain forwarding) and httputil.ReverseProxy (inside an
// intercepted tunnel) drive the steps; the steps are these methods. The
// state travels in goproxy's ProxyCtx.UserData (plain forwarding) or the
// request's context (exchangeKey: inside a tunnel, and for the dial hook
// of the forwarding transport); a step that finds none refuses the request
// (errUnjudged) rather than judging it by another policy.
type exchange struct {
	d     *decision
	host  string              // the judged host, for reasons
	entry *config.Entry       // the entry it matched
	scrub *transform.Scrubber // nil: no secrets were injected
	bare  bool                // outside the entry's scope: nothing injected
	token string              // the entry's OAuth2 access token, fetched for this request
	// payloadHash is the SigV4 payload hash of the request's body (or
	// UNSIGNED-PAYLOAD); "" when the request is not signed.
	payloadHash string
	// failed, if set, is why the request cannot go upstream, found while
	// ReverseProxy prepared it (which cannot answer itself).
	failed error
	up     upstreamTripper // the one way upstream
	// bufs lends the buffers the response body is copied to the client
	// with; nil where the body is copied by others (ReverseProxy).
	bufs *copyBuffers

	// Forwarded requests only (a tunnel's upstream dials for its
	// requests): the timeouts and the guard of the policy and entry the
	// request was judged by, for the forwarding transport's dial.
	timeouts Timeouts
	guard    Guard

	// switched is closed when the connection of an accepted 101 Switching
	// Protocols answer is closed (by then the line is written); nil until
	// then. conn is that connection.
	switched chan struct{}
	conn     io.Closer
}

type exchangeKey struct{}

// withExchange is r carrying ex to the later steps.
func withExchange(r *http.Request, ex *exchange) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
}

// exchangeOf is the exchange a request carries; false if it carries none.
func exchangeOf(r *http.Request) (*exchange, bool) {
	ex, ok := r.Context().Value(exchangeKey{}).(*exchange)
	return ex, ok
}

// prepare makes an allowed request's header the one the upstream gets:
// hop-by-hop and Proxy-* headers stripped, no User-Agent of net/http's own,
// the entry's headers injected, and a WebSocket upgrade (the one upgrade
// let through) asked for again if the client asked for it (ws).
func (ex *exchange) prepare(u *url.URL, h http.Header, ws bool) {
	if rules := ex.entry.Transform; rules != nil && !ex.bare {
		inject(h, rules, ex.d) // strips what StripHopByHop does, and more
		rules.ApplyQuery(u)
		if ex.token != "" {
			h["Authorization"] = []string{"Bearer " + ex.token}
			ex.d.injected = append(ex.d.injected, "Authorization")
		} else {
			ex.scrub = rules.Scrubber()
		}
	} else {
		if rules != nil {
			ex.scrub = rules.Scrubber() // out of scope: nothing injected, echoes still scrubbed
		}
		transform.StripHopByHop(h)
	}
	if _, ok := h["User-Agent"]; !ok {
		// An empty value keeps net/http from sending its own User-Agent.
		h["User-Agent"] = []string{""}
	}
	if ws {
		setWebSocketUpgrade(h)
	}
}

// receive takes an upstream's response in: the status on the line, every
// echoed secret scrubbed, an unasked protocol switch refused, and the line
// tied to the end of the body, where the request really ends.
func (ex *exchange) receive(resp *http.Response) error {
	ex.d.status = resp.StatusCode
	scrubResponse(resp, ex.scrub)
	if err := checkSwitch(resp.Request, resp, ex.host); err != nil {
		return err
	}
	resp.Body = wrapLoggingBody(resp.Body, ex.d, ex.bufs)
	return nil
}

// failure is what a request that got no response is recorded and answered
// as, with any secret the upstream echoed into the reason scrubbed.
func (ex *exchange) failure(err error, r *http.Request) *denial {
	return scrubDenial(requestFailure(err, r, ex.host), ex.scrub)
}

// upstreamTripper is the one round-tripper of every exchange. A request
// goes over the upstream connection its client connection (or tunnel)
// keeps in its slot when it has one; upgrades, requests waiting for
// 100-continue and forwarded https:// requests go through an
// http.Transport, which handles those. Either way only addresses the guard
// judged are dialled.
type upstreamTripper struct {
	slot   *upstreamSlot // nil: always the transport
	key    string        // what the slot's connection connects to
	policy *config.Policy
	// dial dials the slot's connection; if nil, guard dials key.
	dial           func(context.Context) (net.Conn, error)
	guard          *Guard
	responseHeader time.Duration
	transport      http.RoundTripper
	// h2, if set, is the tunnel's HTTP/2 connection upstream (the client
	// negotiated h2): every request goes over it. h2conn is its socket.
	h2     *http.ClientConn
	h2conn net.Conn
}

// roundTrip sends r, the request of ex, upstream.
func (u *upstreamTripper) roundTrip(r *http.Request, ex *exchange) (*http.Response, error) {
	if u.h2 != nil {
		ex.d.setUpstream(u.h2conn)
		return u.h2.RoundTrip(r.WithContext(scrubInformational(r.Context(), ex.scrub)))
	}
	if u.slot != nil && r.Header.Get("Upgrade") == "" && r.Header.Get("Expect") == "" {
		return roundTripSlot(u, r, ex.d)
	}
	// Informational answers are scrubbed before anyone relays them; the
	// transport's dial hook finds the exchange (its guard) in the context.
	ctx := context.WithValue(r.Context(), exchangeKey{}, ex)
	ctx = scrubInformational(ctx, ex.scrub)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { ex.d.setUpstream(info.Conn) },
	})
	return u.transport.RoundTrip(r.WithContext(ctx))
}

// dialSlot dials a connection for the slot.
func (u *upstreamTripper) dialSlot(ctx context.Context) (net.Conn, error) {
	if u.dial != nil {
		return u.dial(ctx)
	}
	return u.guard.DialContext(ctx, "tcp", u.key)
}

// exchangeTransport is the round-tripper httputil.ReverseProxy is given:
// each request goes the way of its exchange.
type exchangeTransport struct{}

func (exchangeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ex, ok := exchangeOf(r)
	if !ok {
		return nil, errUnjudged
	}
	if ex.failed != nil {
		return nil, ex.failed
	}
	return ex.up.roundTrip(r, ex)
}
