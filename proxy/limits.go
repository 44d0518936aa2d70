package proxy

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
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
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
	closed  sync.Once
	onClose func() // the connection is gone (the active-connections gauge)
}

func (c *countedConn) Close() error {
	c.releaseSlot()
	err := c.Conn.Close()
	c.closed.Do(c.onClose)
	return err
}

func (c *countedConn) releaseSlot() { c.once.Do(c.release) }

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
		client := netip.Addr{}
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			client = ap.Addr().Unmap()
		}
		den := l.s.limiter.admit(client)
		if den == nil {
			l.s.connectionDelta(1)
			return &countedConn{Conn: c, release: func() { l.s.limiter.release(client) },
				onClose: func() { l.s.connectionDelta(-1) }}, nil
		}
		l.s.refuseConn(c, den, l.answerIn)
	}
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
