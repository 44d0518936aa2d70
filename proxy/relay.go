package proxy

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// relayBufSize is the copy buffer of a tunnel direction while bytes move.
const relayBufSize = 32 << 10

// relay copies both ways between a session's client and its upstream
// until both directions are done, half-closing each side as the other
// finishes, and counts the bytes; then it closes the upstream and ends the
// session. It returns at once: each direction runs on a goroutine of its
// own. A direction with no bytes for idle ends.
//
// An idle tunnel is mostly those two goroutines' stacks: each starts with
// the runtime's starting stack (2 KiB, adapted to the average goroutine)
// and grows, for good, when a call goes deeper than that. So a direction
// starts straight at its copy loop from a fresh goroutine, with all its
// state in one tunnel record, and nothing else on its stack.
//
// An idle tunnel holds no copy buffer either: each direction borrows one
// from a pool only while its socket has bytes to read, and gives it back
// before it waits (see pooledReader).
func (s *Server) relay(ss *session, upstream net.Conn, idle time.Duration) {
	t := &tunnel{s: s, ss: ss, upstream: upstream, idle: idle}
	// Writes go through the tenant's volume cap, if it has one.
	t.toClient, t.toUpstream = volumeGuarded(ss.d, ss.client, upstream)
	t.running.Store(2)
	go t.upstreamToClient()
	go t.clientToUpstream()
}

// tunnel is the state of a relay shared by its two directions.
type tunnel struct {
	s                    *Server
	ss                   *session
	upstream             net.Conn
	toClient, toUpstream net.Conn // the ends as the relay writes to them
	idle                 time.Duration
	clientDone           atomic.Bool  // the client's direction has ended
	running              atomic.Int32 // directions not yet ended
	fromClient, fromUp   pooledReader
}

func (t *tunnel) upstreamToClient() {
	d := t.ss.d
	n, err := t.s.copyTunnel(t.toClient, t.upstream, t.idle, &t.fromUp)
	d.addOut(n)
	// A reset before the upstream sent a byte is a failure. Later the
	// bytes are opaque, and a reset is how many servers close (with a
	// close_notify still unread): the tunnel is not called broken.
	if n == 0 && broken(err) && !t.clientDone.Load() {
		d.fail(brokeOff(err, d.host, "the upstream reset the tunnel before it sent a byte"))
	}
	// The client may reconnect as soon as it sees our FIN.
	releaseSlot(t.ss.client)
	closeWrite(t.ss.client)
	t.directionDone()
}

func (t *tunnel) clientToUpstream() {
	n, _ := t.s.copyTunnel(t.toUpstream, t.ss.client, t.idle, &t.fromClient)
	t.ss.d.addIn(n)
	t.clientDone.Store(true)
	closeWrite(t.upstream)
	t.directionDone()
}

// directionDone ends the tunnel when the last direction ends.
func (t *tunnel) directionDone() {
	if t.running.Add(-1) == 0 {
		_ = t.upstream.Close()
		t.ss.end()
	}
}

// broken tells a read error that ends a tunnel direction abnormally (a
// reset) from its ordinary ends: EOF, the idle timeout, our own close.
func broken(err error) bool {
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, errEOF), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return false
	case errors.As(err, &ne) && ne.Timeout():
		return false
	}
	return true
}

// copyTunnel copies src to dst until EOF or an error, and returns the
// bytes written and the error that ended reading src (nil when writing dst
// failed). A direction with no bytes for idle ends (the read deadline is
// pushed forward as bytes arrive, but at most every idle/16, to keep timer
// updates off the hot path). pr is the direction's reader, set up here
// when src is a plain socket.
func (s *Server) copyTunnel(dst, src net.Conn, idle time.Duration, pr *pooledReader) (int64, error) {
	var (
		total     int64
		refreshed time.Time
	)
	if rc := rawConnOf(src); rc != nil {
		pr.s, pr.rc = s, rc
		pr.fn = pr.read // one closure for the tunnel's life, not one per read
	} else {
		pr = nil
	}
	for {
		if now := time.Now(); now.Sub(refreshed) > idle/16 {
			_ = src.SetReadDeadline(now.Add(idle))
			refreshed = now
		}
		var (
			bp  *[]byte
			n   int
			err error
		)
		if pr != nil {
			bp, n, err = pr.readOnce()
		} else {
			bp = s.getBuf()
			n, err = src.Read(*bp)
		}
		var werr error
		if n > 0 {
			var w int
			w, werr = dst.Write((*bp)[:n])
			total += int64(w)
		}
		if bp != nil {
			s.bufs.Put(bp)
		}
		if werr != nil {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (s *Server) getBuf() *[]byte {
	if bp, ok := s.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, relayBufSize)
	return &b
}

// relayBufPool lends the relay buffers to httputil.ReverseProxy, which
// otherwise allocates 32 KiB for every response it copies.
type relayBufPool Server

func (p *relayBufPool) Get() []byte  { return *(*Server)(p).getBuf() }
func (p *relayBufPool) Put(b []byte) { (*Server)(p).bufs.Put(&b) }

// errEOF marks a clean end of stream from readOnce.
var errEOF = errors.New("EOF")

// pooledReader reads a raw socket, taking a pooled buffer only when a read
// can return data: on EAGAIN the buffer goes back to the pool before the
// runtime's poller waits for the socket (and honours its deadline).
//
// Only EAGAIN sends a direction to the poller. A read that returned fewer
// bytes than the buffer holds does not prove the socket drained, and
// waiting on the poller instead of reading again could hang the tunnel:
// the poller is edge-triggered and wakes only for what arrives later
// (RawConn.Read even forgets a readiness seen before it was called), while
// a short read can stop at a FIN it has consumed (the next read would
// return 0 at once, but no further edge comes) or at a TCP urgent mark
// with bytes behind it. The EAGAIN read is the price of noticing those.
type pooledReader struct {
	s   *Server
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	bp  *[]byte
	n   int
	err error
}

func (r *pooledReader) read(fd uintptr) bool {
	if r.bp == nil {
		r.bp = r.s.getBuf()
	}
	for {
		r.n, r.err = syscall.Read(int(fd), *r.bp)
		if r.err != syscall.EINTR {
			break
		}
	}
	if r.err == syscall.EAGAIN {
		r.s.bufs.Put(r.bp)
		r.bp = nil
		return false
	}
	return true
}

// readOnce reads once and hands over the buffer holding the bytes (nil
// when there was nothing to read).
func (r *pooledReader) readOnce() (*[]byte, int, error) {
	err := r.rc.Read(r.fn)
	bp := r.bp
	r.bp = nil
	switch {
	case err != nil:
		return bp, 0, err
	case r.err != nil:
		return bp, 0, r.err
	case r.n == 0:
		return bp, 0, errEOF
	}
	return bp, r.n, nil
}

// rawConnOf returns the socket under a TCP connection, for pooledReader, or
// nil when c is something else or still holds bytes of its own to hand out.
func rawConnOf(c net.Conn) syscall.RawConn {
	if fc, ok := c.(*framingConn); ok {
		if fc.pending() > 0 {
			return nil
		}
		fc.release()
	}
	tc, ok := innermost(c).(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
