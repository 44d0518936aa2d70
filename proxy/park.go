package proxy

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// defaultParkAfter is how long a tunnel direction waits for bytes on a
// goroutine of its own before it parks (see parker). A park and the wake
// after it cost a handful of system calls and a fresh goroutine, nothing a
// tunnel quiet for a second would notice; a direction that moves bytes
// more often never parks.
const defaultParkAfter = time.Second

// parker holds the tunnel directions that wait for bytes without a
// goroutine. An idle tunnel direction would otherwise be a goroutine
// blocked in a read: its stack and descriptor are most of what an idle
// tunnel costs. A parked direction is a registration in one epoll
// instance and an entry in a map; one goroutine, blocked in epoll_wait (a
// system call: it holds a thread, not a P), wakes it on a fresh goroutine
// when its socket turns readable (bytes, a FIN, a reset), and a runtime
// timer wakes it at its idle deadline.
//
// Registrations are level-triggered and one-shot: bytes or a FIN that
// arrived between the direction's last read (which found nothing) and
// its registration are reported at once, and a socket is reported once per
// park. Each park has a key of its own, never reused, that the epoll event
// carries: a file descriptor number is reused as soon as it is closed, a
// key is not, so a late event for an ended park finds nothing to wake.
//
// Every wake (readiness, idle deadline, a close from outside) goes through
// wake, which hands the direction to exactly one of them: under mu the
// park's key is taken out of the map and out of the direction, and
// whoever took it resumes the direction; the others find nothing.
type parker struct {
	epfd   int
	wakefd int // an eventfd: written by close, to end wait
	done   chan struct{}
	keys   atomic.Uint64 // the last key handed out; 0 is the eventfd's

	mu     sync.Mutex
	parked map[uint64]*direction
	closed bool
}

func newParker() (*parker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := epollEvent(unix.EPOLLIN, 0)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(wakefd)
		return nil, err
	}
	p := &parker{epfd: epfd, wakefd: wakefd, done: make(chan struct{}), parked: make(map[uint64]*direction)}
	go p.wait()
	return p, nil
}

// epollEvent is an event for the mask events carrying key as its data
// (the 8 bytes the kernel hands back as they were given).
func epollEvent(events uint32, key uint64) unix.EpollEvent {
	ev := unix.EpollEvent{Events: events}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], key)
	ev.Fd = int32(binary.NativeEndian.Uint32(b[0:4]))
	ev.Pad = int32(binary.NativeEndian.Uint32(b[4:8]))
	return ev
}

func eventKey(ev *unix.EpollEvent) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint32(b[0:4], uint32(ev.Fd))
	binary.NativeEndian.PutUint32(b[4:8], uint32(ev.Pad))
	return binary.NativeEndian.Uint64(b[:])
}

// wait hands every readiness reported to wake, until close.
func (p *parker) wait() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// Nothing parked is lost: the idle timers still wake every
			// direction, and no direction parks any more.
			p.mu.Lock()
			p.closed = true
			p.mu.Unlock()
			return
		}
		for i := range events[:n] {
			k := eventKey(&events[i])
			if k == 0 {
				return
			}
			p.wake(k, false)
		}
	}
}

// close ends wait; directions park no more. The Server closes its parker
// only when no tunnel is left, so nothing is parked on it.
func (p *parker) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(p.wakefd, one[:])
	<-p.done
	_ = unix.Close(p.epfd)
	_ = unix.Close(p.wakefd)
}

// park registers dr's socket and reports whether dr is parked: then the
// caller must leave dr alone (it may already run again on another
// goroutine) and exit. idleIn is the time left to dr's idle deadline.
//
// The registration is made inside the socket's Control, which holds the
// descriptor open (a concurrent Close defers the close(2) until Control
// returns), so it can only name dr's own socket. The park is visible
// (dr.parked holds its key) before the registration: a close from outside
// closes the connection first and then unparks (see direction.unpark), so
// either the unpark sees the key and resumes dr, or the close came first
// and Control fails, and dr takes its park back and reads on (and finds
// its connection closed). A close after the registration silently drops
// it, but the unpark after that close finds the key.
//
// A wake may take the park before the registration is made (the idle
// timer, or an unpark after a close): then the registration can outlive
// the park. That is harmless: its key finds nothing to wake, it reports
// once at most (one-shot), and the closed socket (the resumed direction
// ends, or finds its connection closed) takes it away.
func (p *parker) park(dr *direction, idleIn time.Duration) bool {
	k := p.keys.Add(1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.parked[k] = dr
	dr.parked.Store(k)
	// The timer may fire at once; its wake waits for mu, and finds the
	// park complete.
	dr.timer = time.AfterFunc(idleIn, func() { p.wake(k, true) })
	p.mu.Unlock()

	var regErr error
	err := dr.pr.rc.Control(func(fd uintptr) {
		ev := epollEvent(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLONESHOT, k)
		regErr = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err == nil && regErr == nil {
		return true
	}
	// Not registered: take the park back, unless a wake already took it
	// (the idle timer, or an unpark after a close): then that wake
	// resumes dr, and this goroutine must leave it.
	if _, tm, ok := p.take(k); ok {
		tm.Stop()
		return false
	}
	return true
}

// take ends park k, if it is still on: the caller then owns its
// direction. It returns the direction and the park's idle timer.
func (p *parker) take(k uint64) (*direction, *time.Timer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	dr, ok := p.parked[k]
	if !ok {
		return nil, nil, false
	}
	delete(p.parked, k)
	dr.parked.Store(0)
	tm := dr.timer
	dr.timer = nil
	return dr, tm, true
}

// wake resumes the direction of park k on a fresh goroutine, unless
// another wake did already. expired: the idle deadline came.
func (p *parker) wake(k uint64, expired bool) {
	dr, tm, ok := p.take(k)
	if !ok {
		return
	}
	if !expired {
		tm.Stop()
	}
	go dr.resume(expired)
}

// unregister drops dr's registration (one-shot: it may have been
// reported, and must go before the next park can register again). It is
// made inside Control, so fd is dr's own socket; if the connection is
// closed, so is the registration.
func (p *parker) unregister(dr *direction) {
	_ = dr.pr.rc.Control(func(fd uintptr) {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// parker returns the Server's parker, made on first use so that a Server
// that never parks holds no epoll instance and no goroutine; nil after
// Shutdown, or if it cannot be made (tunnels then wait on goroutines).
func (s *Server) parker() *parker {
	s.parking.Lock()
	defer s.parking.Unlock()
	if s.parking.p == nil && !s.parking.closed {
		p, err := newParker()
		if err != nil {
			s.log.Warn().Err(err).Msg("idle tunnels cannot park; each keeps its goroutines")
			s.parking.closed = true
			return nil
		}
		s.parking.p = p
	}
	return s.parking.p
}

// closeParker closes the parker, once no tunnel is left.
func (s *Server) closeParker() {
	s.parking.Lock()
	p := s.parking.p
	s.parking.p, s.parking.closed = nil, true
	s.parking.Unlock()
	if p != nil {
		p.close()
	}
}

// abort closes both of the tunnel's connections and resumes its parked
// directions, which then find them closed and end.
func (t *tunnel) abort() {
	_ = t.ss.client.Close()
	_ = t.upstream.Close()
	t.fromUp.unpark()
	t.fromClient.unpark()
}
