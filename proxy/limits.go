package proxy

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound the connections the gateway holds at once. A zero field is
// no limit.
type Limits struct {
	// MaxConns caps client connections overall; beyond it a new one gets
	// 503 too-many-connections.
	MaxConns int
	// MaxConnsPerClient caps the connections of one client address; beyond
	// it a new one gets 429 too-many-connections-per-client.
	MaxConnsPerClient int
}

// The limit codes (X-Proxy-Error).
const (
	CodeTooManyConns          Code = "too-many-connections"
	CodeTooManyConnsPerClient Code = "too-many-connections-per-client"
)

// connLimiter counts the connections of every listener of one Server.
type connLimiter struct {
	limits Limits
	mu     sync.Mutex
	total  int
	per    map[netip.Addr]int
}

// admit counts a new connection, or says which limit refuses it.
func (l *connLimiter) admit(client netip.Addr) *denial {
	if l.limits.MaxConns <= 0 && l.limits.MaxConnsPerClient <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.limits.MaxConns > 0 && l.total >= l.limits.MaxConns:
		return deny(CodeTooManyConns, http.StatusServiceUnavailable, "",
			"the gateway holds its maximum of %d connections; retry later", l.limits.MaxConns)
	case l.limits.MaxConnsPerClient > 0 && l.per[client] >= l.limits.MaxConnsPerClient:
		return deny(CodeTooManyConnsPerClient, http.StatusTooManyRequests, "",
			"%s holds its maximum of %d connections; close some or retry later", client, l.limits.MaxConnsPerClient)
	}
	l.total++
	if l.per == nil {
		l.per = make(map[netip.Addr]int)
	}
	l.per[client]++
	return nil
}

func (l *connLimiter) release(client netip.Addr) {
	if l.limits.MaxConns <= 0 && l.limits.MaxConnsPerClient <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[client]--; l.per[client] <= 0 {
		delete(l.per, client)
	}
}

// countedConn gives its slot back when closed — just before, in fact: a
// client that sees our FIN and reconnects at once must find its slot free.
// It holds what the release needs rather than closures over it: one
// allocation per connection instead of three.
type countedConn struct {
	net.Conn
	s        *Server // nil: counted by nothing (tests of the layers)
	client   netip.Addr
	released atomic.Bool
	closed   atomic.Bool
}

func (c *countedConn) Close() error {
	c.releaseSlot()
	err := c.Conn.Close()
	// The connection is gone (the active-connections gauge).
	if c.closed.CompareAndSwap(false, true) && c.s != nil {
		c.s.connectionDelta(-1)
	}
	return err
}

func (c *countedConn) releaseSlot() {
	if c.released.CompareAndSwap(false, true) && c.s != nil {
		c.s.limiter.release(c.client)
	}
}

// releaseSlot gives back the limit slot of a client connection (under any
// of our wrappers) ahead of closing it.
func releaseSlot(c net.Conn) {
	if cc, ok := layerOf[*countedConn](c); ok {
		cc.releaseSlot()
	}
}

func (c *countedConn) NetConn() net.Conn { return c.Conn }

// limitedListener applies the limits to every accepted connection. A refused
// connection of the explicit listener gets an HTTP answer (its client speaks
// HTTP to us); a transparent one is closed (its client speaks to someone
// else). Either way the refusal is logged and counted.
type limitedListener struct {
	net.Listener
	s        *Server
	answerIn bool // write an HTTP answer to a refused connection
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := remoteIP(c)
		den := l.s.limiter.admit(client)
		if den == nil {
			l.s.connectionDelta(1)
			return &countedConn{Conn: c, s: l.s, client: client}, nil
		}
		l.s.refuseConn(c, den, l.answerIn)
	}
}

// remoteIP is the address a connection comes from (unmapped), read from
// its *net.TCPAddr without formatting and parsing it; the zero Addr if
// there is none.
func remoteIP(c net.Conn) netip.Addr {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	return clientIP(c.RemoteAddr().String())
}

// refuseConn answers (or just closes) a connection a limit refused, off the
// accept loop so a slow client cannot stall it.
func (s *Server) refuseConn(c net.Conn, den *denial, answer bool) {
	d := newDecision(&s.sink, c.RemoteAddr().String(), modeHTTP)
	d.refuse(den)
	d.finish()
	if s.sink.observer.Limited != nil {
		s.sink.observer.Limited(den.code)
	}
	if !answer {
		_ = c.Close()
		return
	}
	go func() {
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(s.timeouts.ReadHeader))
		resp := den.response(nil)
		resp.Close = true
		_ = resp.Write(c)
	}()
}

// connectionDelta tells the observer that a client connection opened (+1)
// or closed (-1).
func (s *Server) connectionDelta(delta int) {
	if s.sink.observer.Connection != nil {
		s.sink.observer.Connection(delta)
	}
}
