package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hookgate/hookgate/config"
)

// upstreamSlot holds at most one keep-alive upstream connection, owned by
// one client connection of the explicit listener (its plain-HTTP requests)
// or by one intercepted tunnel (its requests inside). Requests go over it
// one after the other, in the goroutine that serves the client: compared
// with http.Transport's pool this saves the hand-offs to the transport's
// reader and writer goroutines and a pool lookup per request, and it knows
// which address it dialled. The serving goroutine uses the slot; drop may
// come from another (Shutdown closing the client connection).
type upstreamSlot struct {
	conn atomic.Pointer[upstreamConn]
}

// drop closes the slot's connection, if any.
func (sl *upstreamSlot) drop() { sl.conn.Swap(nil).close() }

// upstreamConn is one keep-alive upstream connection.
type upstreamConn struct {
	key    string         // what it connects to (host:port)
	policy *config.Policy // the policy its addresses were judged by
	conn   net.Conn
	addr   netip.AddrPort // the address dialled, for the decision lines (zero if unknown)
	br     *bufio.Reader
	bw     *bufio.Writer
}

func (u *upstreamConn) close() {
	if u != nil {
		_ = u.conn.Close()
	}
}

// roundTripSlot sends r over the connection in u's slot, dialling one
// (u.dialSlot) when there is none for u's key and policy. A
// request without a body is retried once on a fresh connection when a
// reused one turns out to be closed (an idle keep-alive connection the
// upstream timed out). The upstream has u.responseHeader to start its
// answer.
func roundTripSlot(u *upstreamTripper, r *http.Request, d *decision) (*http.Response, error) {
	sl := u.slot
	for attempt := 0; ; attempt++ {
		uc := sl.conn.Load()
		reused := uc != nil && uc.key == u.key && uc.policy == u.policy
		if !reused {
			sl.drop()
			conn, err := u.dialSlot(r.Context())
			if err != nil {
				return nil, err
			}
			uc = &upstreamConn{key: u.key, policy: u.policy, conn: conn,
				br: bufio.NewReaderSize(conn, 4096), bw: bufio.NewWriterSize(conn, 4096)}
			// As decision.setUpstream, once per connection rather than
			// once per request.
			uc.addr, _ = netip.ParseAddrPort(conn.RemoteAddr().String())
			sl.conn.Store(uc)
		}
		if uc.addr.IsValid() {
			d.upstream = uc.addr
		}
		resp, err := sendRequest(uc, r, u.responseHeader)
		if err == nil {
			// After a 101 the connection speaks another protocol (or is
			// refused): it is never reused.
			keep := !resp.Close && !r.Close && resp.StatusCode != http.StatusSwitchingProtocols
			resp.Body = &directBody{ReadCloser: resp.Body, slot: sl, uc: uc, keep: keep}
			return resp, nil
		}
		sl.drop()
		if !reused || attempt > 0 || !retryable(r, err) {
			return nil, err
		}
	}
}

// watchClientAfter is how long sendRequest waits for an answer to begin
// before it also watches for the client going away. Most answers begin
// sooner, and watching (a callback on the request's context) costs
// allocations on every request that waiting first does not; a client that
// leaves during a longer wait still ends it, at most this much later.
const watchClientAfter = 5 * time.Millisecond

// sendRequest writes one request and reads its response header, skipping
// informational (1xx) answers, within responseHeader. A client that goes
// away (its request's context ends) stops the wait.
func sendRequest(uc *upstreamConn, r *http.Request, responseHeader time.Duration) (*http.Response, error) {
	if err := r.Write(uc.bw); err != nil {
		return nil, err
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(responseHeader)
	defer func() { _ = uc.conn.SetReadDeadline(time.Time{}) }()
	w := answerWait{uc: uc, r: r, deadline: deadline}
	defer w.stopWatching()
	for {
		resp, err := w.read()
		if err != nil {
			if ctxErr := r.Context().Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, &responseError{err: err}
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// answerWait is sendRequest's wait for the answers to one request.
type answerWait struct {
	uc       *upstreamConn
	r        *http.Request
	deadline time.Time
	stop     func() bool // set once the client is watched
}

// read reads one response header. Until an answer begins it reads with a
// deadline watchClientAfter away (or the real one if nearer); if that
// passes, it watches the client and waits on, until the real deadline.
// Once an answer has begun, the rest of its header has until the real
// deadline.
func (w *answerWait) read() (*http.Response, error) {
	uc := w.uc
	if w.stop == nil {
		first := time.Now().Add(watchClientAfter)
		if first.After(w.deadline) {
			first = w.deadline
		}
		_ = uc.conn.SetReadDeadline(first)
		_, err := uc.br.Peek(1)
		switch {
		case err == nil:
			if !headerBuffered(uc.br) {
				_ = uc.conn.SetReadDeadline(w.deadline)
			}
		case first.Before(w.deadline) && errors.Is(err, os.ErrDeadlineExceeded):
			// A timed-out read consumed nothing: wait on, watching.
			_ = uc.conn.SetReadDeadline(w.deadline)
			w.stop = context.AfterFunc(w.r.Context(), func() { _ = uc.conn.SetReadDeadline(time.Now()) })
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF // as http.ReadResponse says it
		default:
			return nil, err
		}
	}
	return http.ReadResponse(uc.br, w.r)
}

// headerBuffered reports whether br holds a whole header block already (a
// blank line): reading it reads nothing more from the connection, so the
// deadline it has does not matter.
func headerBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, []byte("\r\n\r\n"))
}

func (w *answerWait) stopWatching() {
	if w.stop != nil {
		w.stop()
	}
}

// retryable: a request with no body whose reused connection was closed by
// the upstream before it answered (an idle keep-alive connection it timed
// out) can be sent again.
func retryable(r *http.Request, err error) bool {
	if r.Body != nil && r.Body != http.NoBody {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// directBody gives the upstream connection back to its client connection
// when the body was read to its end, and closes it otherwise (a body not
// read to the end leaves the connection in an unknown state).
type directBody struct {
	io.ReadCloser
	slot *upstreamSlot
	uc   *upstreamConn
	keep bool
	eof  bool
}

func (b *directBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *directBody) Close() error {
	err := b.ReadCloser.Close()
	if b.ReadCloser == http.NoBody {
		b.eof = true
	}
	if !b.keep || !b.eof {
		b.slot.conn.CompareAndSwap(b.uc, nil)
		b.uc.close()
	}
	return err
}
