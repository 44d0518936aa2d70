package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// watchConn follows one client connection that net/http serves, so that
// the requests net/http ends by itself still get their decision line: a
// header block too large (net/http answers 431) or one it cannot parse (400
// and the like), a header that does not arrive within the header read
// timeout (a slowloris client: net/http closes without a word), and a
// client that hangs up in the middle of a header. net/http tells no handler
// of these; the connection's states (http.Server.ConnState), the hand-over
// of each request to the handler, and the reads and writes on the
// connection tell them apart.
//
// From the start of the connection, or the end of a request, until the next
// request is handed to the handler, the connection is "between requests":
// whatever is written then is net/http's own answer, and the bytes read
// then belong to a request not handed over yet.
type watchConn struct {
	net.Conn
	s *Server
	// parent, if set, is the decision of the tunnel or redirected
	// connection this one is served for: its identity (client, mode, host,
	// port, entry, sni) goes on our line, and when we write a line it
	// writes none (exactly one line per request or tunnel).
	parent *decision
	client string

	between  atomic.Bool
	since    atomic.Int64 // unix nanoseconds when between began
	read     atomic.Int64 // bytes read while between
	answered atomic.Int32 // the status net/http wrote while between
	served   atomic.Int64 // requests handed to the handler

	mu      sync.Mutex
	readErr error // the last read error
}

// watchTLSConn is a watchConn over a TLS connection: net/http fills in
// Request.TLS from ConnectionState, as it would for the *tls.Conn itself.
type watchTLSConn struct {
	*watchConn
	tls *tls.Conn
}

func (c watchTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// watch wraps a connection about to be served by one of our net/http
// servers. parent is the decision it is served for (nil on the explicit
// listener).
func (s *Server) watch(c net.Conn, parent *decision) net.Conn {
	w := &watchConn{Conn: c, s: s, parent: parent, client: c.RemoteAddr().String()}
	if parent != nil {
		w.client = parent.client
	}
	w.startBetween()
	if tc, ok := c.(*tls.Conn); ok {
		return watchTLSConn{watchConn: w, tls: tc}
	}
	return w
}

// watchListener watches every connection it accepts.
type watchListener struct {
	net.Listener
	s *Server
}

func (l *watchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.s.watch(c, nil), nil
}

// NetConn returns the wrapped connection.
func (c *watchConn) NetConn() net.Conn { return c.Conn }

func (c *watchConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.between.Load() {
		c.read.Add(int64(n))
	}
	if err != nil {
		c.mu.Lock()
		c.readErr = err
		c.mu.Unlock()
	}
	return n, err
}

func (c *watchConn) Write(p []byte) (int, error) {
	if c.between.Load() && c.answered.Load() == 0 {
		if st, ok := statusLine(p); ok {
			c.answered.Store(int32(st))
		}
	}
	return c.Conn.Write(p)
}

// statusLine reads the status code of a response that starts in p.
func statusLine(p []byte) (int, bool) {
	const prefix = "HTTP/1.x "
	if len(p) < len(prefix)+3 || string(p[:7]) != "HTTP/1." || p[8] != ' ' {
		return 0, false
	}
	code := 0
	for _, b := range p[len(prefix) : len(prefix)+3] {
		if b < '0' || b > '9' {
			return 0, false
		}
		code = code*10 + int(b-'0')
	}
	return code, true
}

func (c *watchConn) startBetween() {
	c.mu.Lock()
	c.readErr = nil // a handler's aborted background read is no news
	c.mu.Unlock()
	c.read.Store(0)
	c.answered.Store(0)
	c.since.Store(time.Now().UnixNano())
	c.between.Store(true)
}

// handedOver marks a request given to the handler, which writes its line.
func (c *watchConn) handedOver() {
	c.between.Store(false)
	c.served.Add(1)
}

// unfinished says what ended the connection between requests, when that
// is a request of its own: nil for a connection that simply closed.
func (c *watchConn) unfinished() *denial {
	c.mu.Lock()
	readErr := c.readErr
	c.mu.Unlock()
	var ne net.Error
	timedOut := readErr != nil && errors.As(readErr, &ne) && ne.Timeout()
	read := c.read.Load()
	switch status := int(c.answered.Load()); {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		return deny(CodeClientHeaderTooLarge, status, "", "the request header is larger than %d bytes", c.s.maxHdr)
	case status != 0:
		return deny(CodeBadRequest, status, "", "the HTTP server refused the request as malformed (%d %s)", status, http.StatusText(status))
	case timedOut && (read > 0 || c.served.Load() == 0):
		return deny(CodeClientTimeout, 0, "", "the request header did not arrive within %v; the connection was closed", c.s.timeouts.ReadHeader)
	case read > 0 && readErr != nil:
		return deny(CodeClientClosed, 0, "", "the client closed the connection in the middle of a request header")
	}
	return nil
}

// closed writes the line of a request net/http ended by itself.
func (c *watchConn) closed() {
	if !c.between.Load() {
		return
	}
	den := c.unfinished()
	if den == nil {
		return
	}
	d := newDecision(&c.s.sink, c.client, modeHTTP)
	d.start = time.Unix(0, c.since.Load())
	if p := c.parent; p != nil {
		d.mode, d.transparent = p.mode, p.transparent
		d.host, d.port, d.entry, d.sni = p.host, p.port, p.entry, p.sni
		p.handOff() // this line stands for it
	}
	d.refuse(den)
	d.finish()
}

// watchOf finds the watchConn under a connection net/http serves.
func watchOf(c net.Conn) *watchConn {
	w, ok := layerOf[interface{ watcher() *watchConn }](c)
	if !ok {
		return nil
	}
	return w.watcher()
}

// watcher is the watch itself, in the plain and the TLS form.
func (c *watchConn) watcher() *watchConn { return c }

// connState follows the states of the connections of our net/http servers:
// the framing check's (see framingConnState), then the watch's.
func (s *Server) connState(c net.Conn, st http.ConnState) {
	framingConnState(c, st)
	w := watchOf(c)
	if w == nil {
		return
	}
	switch st {
	case http.StateIdle:
		w.startBetween()
	case http.StateClosed:
		w.closed()
	}
}

// handOver marks every request as handed to its handler, which writes its
// decision line, before it runs h.
func (s *Server) handOver(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			if w := watchOf(c); w != nil {
				w.handedOver()
			}
		}
		h.ServeHTTP(rw, r)
	})
}
