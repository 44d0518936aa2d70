package proxy

import (
	"iter"
	"net"
)

// A client connection reaches net/http, or a relay, under layers of our
// wrappers, each for one job: countedConn (the connection limits),
// watchConn (lines for requests net/http ends itself), framingConn (the
// framing check), tls.Conn (an intercepted tunnel). Each says what it wraps
// with NetConn, as *tls.Conn does; layers is the one walk down them.
// replayConn (bytes already peeked) deliberately does not: what it holds
// must be read before anything under it, so no walk may go past it.

// layers yields c and each connection under it, outermost first, down to
// the one that wraps nothing it tells of (the TCP connection).
func layers(c net.Conn) iter.Seq[net.Conn] {
	return func(yield func(net.Conn) bool) {
		for c != nil {
			if !yield(c) {
				return
			}
			w, ok := c.(interface{ NetConn() net.Conn })
			if !ok {
				return
			}
			c = w.NetConn()
		}
	}
}

// layerOf finds the outermost layer of c that is a T.
func layerOf[T any](c net.Conn) (T, bool) {
	for l := range layers(c) {
		if t, ok := l.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// innermost is the connection under every layer: the TCP connection, for
// its socket options and half-close.
func innermost(c net.Conn) net.Conn {
	for l := range layers(c) {
		c = l
	}
	return c
}
