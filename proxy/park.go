package proxy

import (
	"container/heap"
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// defaultParkAfter is how long a tunnel direction waits for bytes on a
// goroutine of its own before it parks (see parker). A park and the wake
// after it cost about 20 µs of CPU (BenchmarkParkWake: two epoll_ctl
// calls, a heap entry, a fresh goroutine), which a direction quiet for 100 ms
// pays at most ten times a second; in exchange an idle direction gives
// back its goroutine's stack soon after a burst of new tunnels, when the
// stacks add up. A direction that moves bytes more often never parks.
const defaultParkAfter = 100 * time.Millisecond

// parker holds the tunnel directions that wait for bytes without a
// goroutine. An idle tunnel direction would otherwise be a goroutine
// blocked in a read: its stack and descriptor are most of what an idle
// tunnel costs. A parked direction is a registration in one epoll
// instance and an entry in a map. The epoll instance is itself a
// descriptor in the runtime's poller, like a socket: when one of its
// sockets turns readable (bytes, a FIN, a reset), the runtime wakes the
// parker's goroutine, which collects the ready sockets without blocking
// and resumes each direction on a fresh goroutine. No thread is held in a
// blocking epoll_wait: a wake costs what a socket's readiness costs any
// goroutine, not a hand-off between threads. One runtime timer per parker
// ends the directions whose idle deadline came: the parked directions are
// kept in a heap by deadline, and the timer is set for the earliest (a
// timer of its own for each park would be most of a parked direction's
// heap).
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
	ep   *os.File        // the epoll instance, non-blocking, in the runtime's poller
	rc   syscall.RawConn // ep's, for waiting on it and for epoll_ctl
	done chan struct{}
	keys atomic.Uint64 // the last key handed out

	mu        sync.Mutex
	parked    map[uint64]*direction
	deadlines byDeadline  // the parked directions, earliest idle deadline first
	timer     *time.Timer // runs expire; made by the first park
	timerAt   time.Time   // when timer fires; zero: stopped or fired
	closed    bool
}

func newParker() (*parker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking, so that os.NewFile hands it to the runtime's poller:
	// an epoll instance is readable while it has events to collect.
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ep := os.NewFile(uintptr(epfd), "parker-epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		_ = ep.Close()
		return nil, err
	}
	p := &parker{ep: ep, rc: rc, done: make(chan struct{}), parked: make(map[uint64]*direction)}
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

// wait hands every readiness reported to wake, until close. It collects
// events without blocking (a zero timeout) and waits in the runtime's
// poller while there are none; a collection that fills the buffer is
// followed by another at once.
func (p *parker) wait() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 64)
	var (
		n   int
		err error
	)
	collect := func(fd uintptr) bool {
		for {
			n, err = unix.EpollWait(int(fd), events, 0)
			if err != unix.EINTR {
				break
			}
		}
		return n > 0 || err != nil
	}
	for {
		if rerr := p.rc.Read(collect); rerr != nil || err != nil {
			// Closed, or the instance failed. Nothing parked is lost:
			// the idle deadlines still end every direction, and no
			// direction parks any more.
			p.mu.Lock()
			p.closed = true
			p.mu.Unlock()
			return
		}
		for i := range events[:n] {
			p.wake(eventKey(&events[i]))
		}
	}
}

// close ends wait; directions park no more. The Server closes its parker
// once, when no tunnel is left, so nothing is parked on it. wait may have
// ended before, on an error: the descriptor is closed all the same.
func (p *parker) close() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	// Closing the file ends wait's Read; the descriptor is closed once
	// it returns.
	_ = p.ep.Close()
	<-p.done
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
// deadline, or an unpark after a close): then the registration can outlive
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
	dr.deadline = time.Now().Add(idleIn)
	heap.Push(&p.deadlines, dr)
	// The timer may fire at once; expire waits for mu, and finds the park
	// complete.
	if p.timerAt.IsZero() || dr.deadline.Before(p.timerAt) {
		p.setTimer(dr.deadline)
	}
	p.mu.Unlock()

	var regErr error
	err := dr.pr.rc.Control(func(fd uintptr) {
		ev := epollEvent(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLONESHOT, k)
		regErr = p.ctl(unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err == nil && regErr == nil {
		return true
	}
	// Not registered: take the park back, unless a wake already took it
	// (the idle deadline, or an unpark after a close): then that wake
	// resumes dr, and this goroutine must leave it.
	if _, ok := p.take(k); ok {
		return false
	}
	return true
}

// take ends park k, if it is still on: the caller then owns its
// direction.
func (p *parker) take(k uint64) (*direction, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	dr, ok := p.parked[k]
	if !ok {
		return nil, false
	}
	p.forget(dr)
	// The timer stays as it is: if dr was the earliest, it fires early
	// once, and expire sets it for the next.
	heap.Remove(&p.deadlines, dr.heapIndex)
	return dr, true
}

// forget ends dr's park, with mu held (under which dr.parked is stored
// and cleared).
func (p *parker) forget(dr *direction) {
	delete(p.parked, dr.parked.Load())
	dr.parked.Store(0)
}

// wake resumes the direction of park k on a fresh goroutine, unless
// another wake (or its idle deadline) took it already.
func (p *parker) wake(k uint64) {
	if dr, ok := p.take(k); ok {
		go dr.resume(false)
	}
}

// expire ends the parks whose idle deadline has come, resuming each
// direction on a fresh goroutine to end, and sets the timer for the next
// deadline. It runs on the timer, possibly early (see take) or late.
func (p *parker) expire() {
	var due []*direction
	p.mu.Lock()
	now := time.Now()
	p.timerAt = time.Time{}
	for len(p.deadlines) > 0 && !p.deadlines[0].deadline.After(now) {
		dr := heap.Pop(&p.deadlines).(*direction)
		p.forget(dr)
		due = append(due, dr)
	}
	if len(p.deadlines) > 0 && !p.closed {
		p.setTimer(p.deadlines[0].deadline)
	}
	p.mu.Unlock()
	for _, dr := range due {
		go dr.resume(true)
	}
}

// setTimer sets the timer to run expire at t; with mu held.
func (p *parker) setTimer(t time.Time) {
	p.timerAt = t
	if p.timer == nil {
		p.timer = time.AfterFunc(time.Until(t), p.expire)
		return
	}
	p.timer.Reset(time.Until(t))
}

// byDeadline is a heap of parked directions, the earliest idle deadline
// first; each direction knows its place (heapIndex), so that a wake can
// take it out.
type byDeadline []*direction

func (h byDeadline) Len() int           { return len(h) }
func (h byDeadline) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h byDeadline) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *byDeadline) Push(x any) {
	dr := x.(*direction)
	dr.heapIndex = len(*h)
	*h = append(*h, dr)
}
func (h *byDeadline) Pop() any {
	old := *h
	dr := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return dr
}

// unregister drops dr's registration (one-shot: it may have been
// reported, and must go before the next park can register again). It is
// made inside Control, so fd is dr's own socket; if the connection is
// closed, so is the registration.
func (p *parker) unregister(dr *direction) {
	_ = dr.pr.rc.Control(func(fd uintptr) {
		_ = p.ctl(unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// ctl is epoll_ctl on the parker's instance, inside its Control: after
// close it fails, rather than reach a reused descriptor number.
func (p *parker) ctl(op, fd int, ev *unix.EpollEvent) error {
	var err error
	if cerr := p.rc.Control(func(epfd uintptr) {
		err = unix.EpollCtl(int(epfd), op, fd, ev)
	}); cerr != nil {
		return cerr
	}
	return err
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
