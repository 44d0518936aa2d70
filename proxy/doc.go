// Package proxy is hookgate's egress proxy: the explicit HTTP/CONNECT
// listener, the transparent listener for redirected connections, TLS
// interception for entries that inject credentials, the guarded dialer
// every upstream connection goes through, the denial answers, and the one
// decision line per request or tunnel.
//
// Every connection is judged by one config.Policy generation, read once
// when its request or tunnel starts (Server.Policy, swapped by SetPolicy on
// reload): config.Policy.Judge decides the name, then every address it
// resolves to; the Guard judges the addresses again on every dial and dials
// only those. Nothing is dialled or answered before the policy has spoken.
//
// Three ways in:
//
//   - CONNECT host:port (connect.go) is ours from the first byte: judge the
//     name and its addresses (admit), answer 200, read the ClientHello and
//     bind its SNI to the CONNECT host, then either relay the bytes to the
//     judged address (relay.go, splice(2) where it can) or, for an entry
//     with a transform, intercept (mitm.go).
//   - Any other request on the explicit listener (forward.go) is forwarded
//     by goproxy with our hooks; origin-form requests get a 400.
//   - A redirected connection (transparent.go) is told apart by its first
//     byte: TLS is judged by its SNI (or the original destination's IP) and
//     then goes the CONNECT way from admit on; plain HTTP is served by
//     net/http and each request goes the forwarding way, routed by its Host.
//
// HTTP requests — absolute-form, transparent plain HTTP, and the requests
// inside an intercepted tunnel — take one pipeline (exchange.go): judge →
// prepare (strip hop-by-hop headers, inject the entry's) → one round-tripper
// (the client connection's or tunnel's keep-alive upstream connection, or
// an http.Transport for upgrades and 100-continue) → receive (scrub echoed
// secrets, refuse unasked protocol switches) → one decision line. The state
// (exchange) travels typed in the request's context; a step that finds
// none refuses the request.
//
// What goproxy does: on the forwarding path only, it tells absolute-form
// requests from origin-form ones (the latter go to our NonproxyHandler),
// runs our request hook (onRequest: judge, prepare) and response hook
// (onResponse: an upstream failure becomes our denial), calls our
// round-tripper (ctx.RoundTripper), and writes the response to the client:
// header, status, the body streamed (flushed for event streams and chunked
// bodies), trailers, and after a 101 the two-way relay of a WebSocket. What
// we do around it: CONNECT never reaches it; its transport, CA, MITM loop,
// environment proxy and HTTP/2 are all switched off; every upstream
// connection is ours (the guard, verified TLS). Inside an intercepted
// tunnel net/http's server and httputil.ReverseProxy drive the same
// pipeline instead: the host binding of each request and the 1xx scrubbing
// need a loop we control. The pipeline depends on neither driver, so
// ReverseProxy could drive forwarding too; goproxy stays there as the
// project's proxy library, doing the job above. Its types never leave this
// package.
//
// A decision (decision.go) is owned by whoever serves its request or
// tunnel and finished once; a tunnel that becomes requests of their own
// hands its line off to them. Connection wrappers (limits, the watch of
// requests net/http ends itself, the framing check, TLS) are walked by one
// helper (layers.go).
package proxy
