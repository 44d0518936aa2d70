package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// relay copies both ways between a session's client and its upstream
// until both directions are done, half-closing each side as the other
// finishes, and counts the bytes; then it closes the upstream and ends the
// session. It returns at once: each direction runs on a goroutine of its
// own. A direction with no bytes for idle ends.
//
// An idle tunnel holds no goroutine: a direction that had no bytes for
// parkAfter parks (see parker) and its goroutine exits; the socket's
// readiness, the idle deadline or a close from outside resumes it on a
// fresh goroutine, where it left off. A busy direction never parks: its
// goroutine starts straight at its copy loop, with all its state in one
// tunnel record, so that its stack stays at the runtime's starting size.
//
// An idle tunnel holds no copy buffer either: each direction borrows one
// (the small buffer of Server.bufs) only while its socket has bytes to
// read, and gives it back before it waits (see pooledReader).
func (s *Server) relay(ss *session, upstream net.Conn, idle time.Duration) {
	t := &tunnel{s: s, ss: ss, upstream: upstream, idle: idle}
	// Writes go through the tenant's volume cap, if it has one.
	toClient, toUpstream := volumeGuarded(ss.d, ss.client, upstream)
	t.fromUp.init(t, toClient, upstream)
	t.fromClient.init(t, toUpstream, ss.client)
	t.running.Store(2)
	ss.attach(t)
	go t.fromUp.start()
	go t.fromClient.start()
}

// tunnel is the state of a relay shared by its two directions.
type tunnel struct {
	s                  *Server
	ss                 *session
	upstream           net.Conn
	idle               time.Duration
	clientDone         atomic.Bool  // the client's direction has ended
	running            atomic.Int32 // directions not yet ended
	fromUp, fromClient direction
}

// direction is one way of a tunnel: what its copy loop needs to stop
// (park) and carry on later, on another goroutine.
type direction struct {
	t        *tunnel
	dst, src net.Conn
	pr       pooledReader // pr.rc is nil when src is not a plain socket
	p        *parker      // nil: this direction never parks
	every    time.Duration
	total    int64
	active   time.Time // bytes were read since, give or take every
	rearm    bool      // the read deadline must be set again
	parkable bool      // the read deadline is the park's, not the idle one
	noPark   bool      // a park failed: this direction waits on its goroutine

	parked    atomic.Uint64 // the key of the park it is in, or 0
	deadline  time.Time     // the park's idle deadline; guarded by p.mu
	heapIndex int           // its place in p.deadlines; guarded by p.mu
}

func (dr *direction) init(t *tunnel, dst, src net.Conn) {
	dr.t, dr.dst, dr.src = t, dst, src
	s := t.s
	if rc := rawConnOf(src); rc != nil {
		dr.pr.s, dr.pr.rc = s, rc
		dr.pr.fn = dr.pr.read // one closure for the tunnel's life, not one per read
	}
	// The read deadline is pushed forward as bytes arrive, but at most
	// every idle/16, to keep timer updates off the hot path; for a
	// direction that may park, often enough that it parks only after
	// three quarters of parkAfter without bytes at least.
	dr.every = t.idle / 16
	if dr.pr.rc != nil && s.parkAfter > 0 && s.parkAfter < t.idle {
		dr.p = s.parker()
		if dr.p != nil {
			dr.every = min(dr.every, s.parkAfter/4)
		}
	}
	dr.rearm = true
}

// start runs the direction from its first byte.
func (dr *direction) start() {
	if n, parked, err := dr.copy(); !parked {
		dr.end(n, err)
	}
}

// resume runs a parked direction on: its socket turned readable or was
// closed (expired false), or its idle deadline came.
func (dr *direction) resume(expired bool) {
	dr.p.unregister(dr)
	if expired {
		dr.end(dr.total, os.ErrDeadlineExceeded)
		return
	}
	dr.rearm = true
	dr.start()
}

// unpark resumes dr if it is parked. Whoever closes a tunnel's connection
// from outside the relay calls it, after the close, for both directions:
// a closed socket leaves the epoll set without a word, and nothing else
// would wake dr before its idle deadline.
func (dr *direction) unpark() {
	if k := dr.parked.Load(); k != 0 {
		dr.p.wake(k)
	}
}

func (dr *direction) end(n int64, err error) {
	t := dr.t
	d := t.ss.d
	if dr == &t.fromUp {
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
	} else {
		d.addIn(n)
		t.clientDone.Store(true)
		closeWrite(t.upstream)
	}
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

// copy copies src to dst until EOF or an error, or until the direction
// parks, and returns the bytes written in all and the error that ended
// reading src (nil when writing dst failed). A direction with no bytes for
// the tunnel's idle time ends; one with none for parkAfter parks, and its
// goroutine must then leave it (parked).
func (dr *direction) copy() (total int64, parked bool, err error) {
	s := dr.t.s
	pr := &dr.pr
	if pr.rc == nil {
		pr = nil
	}
	for {
		now := time.Now()
		if now.Sub(dr.active) > dr.every {
			dr.active, dr.rearm = now, true
		}
		if dr.rearm {
			dl := dr.active.Add(dr.t.idle)
			dr.parkable = false
			if dr.p != nil && !dr.noPark {
				if at := now.Add(s.parkAfter); at.Before(dl) {
					dl, dr.parkable = at, true
				}
			}
			_ = dr.src.SetReadDeadline(dl)
			dr.rearm = false
		}
		var (
			bp  *[smallCopyBuffer]byte
			n   int
			err error
		)
		if pr != nil {
			bp, n, err = pr.readOnce()
		} else {
			bp = s.bufs.small()
			n, err = dr.src.Read(bp[:])
		}
		var werr error
		if n > 0 {
			var w int
			w, werr = dr.dst.Write(bp[:n])
			dr.total += int64(w)
		}
		if bp != nil {
			s.bufs.putSmall(bp)
		}
		if werr != nil {
			return dr.total, false, nil
		}
		if err != nil {
			// The park's deadline: no bytes for a while, but the idle
			// deadline is still ahead. The last read found nothing
			// (EAGAIN), so the socket holds nothing unreported: what
			// comes from now on, a FIN included, makes it readable.
			idleIn := time.Until(dr.active.Add(dr.t.idle))
			if dr.parkable && idleIn > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
				dr.rearm = true
				if dr.p.park(dr, idleIn) {
					return 0, true, nil
				}
				// Not parked (the connection is closed, or the
				// parker): wait here from now on, as if parking were
				// off.
				dr.noPark = true
				continue
			}
			return dr.total, false, err
		}
	}
}

// relayBufPool lends the relay's buffers to httputil.ReverseProxy, which
// otherwise allocates 32 KiB for every response it copies. Put takes back
// the array under the slice: nothing is allocated to hold it.
type relayBufPool Server

func (p *relayBufPool) Get() []byte { return (*Server)(p).bufs.small()[:] }
func (p *relayBufPool) Put(b []byte) {
	if cap(b) >= smallCopyBuffer {
		(*Server)(p).bufs.putSmall((*[smallCopyBuffer]byte)(b[:smallCopyBuffer]))
	}
}

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
	bp  *[smallCopyBuffer]byte
	n   int
	err error
}

func (r *pooledReader) read(fd uintptr) bool {
	if r.bp == nil {
		r.bp = r.s.bufs.small()
	}
	for {
		r.n, r.err = syscall.Read(int(fd), r.bp[:])
		if r.err != syscall.EINTR {
			break
		}
	}
	if r.err == syscall.EAGAIN {
		r.s.bufs.putSmall(r.bp)
		r.bp = nil
		return false
	}
	return true
}

// readOnce reads once and hands over the buffer holding the bytes (nil
// when there was nothing to read).
func (r *pooledReader) readOnce() (*[smallCopyBuffer]byte, int, error) {
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
