package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
	br     *bufio.Reader
	bw     *bufio.Writer
}

func (u *upstreamConn) close() {
	if u != nil {
		_ = u.conn.Close()
	}
}

// roundTripSlot sends r over the slot's connection, dialling one when there
// is none for key and policy. A request without a body is retried once on a
// fresh connection when a reused one turns out to be closed (an idle
// keep-alive connection the upstream timed out). The upstream has
// responseHeader to start its answer.
func roundTripSlot(sl *upstreamSlot, key string, p *config.Policy, dial func(context.Context) (net.Conn, error), responseHeader time.Duration, r *http.Request, d *decision) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		uc := sl.conn.Load()
		reused := uc != nil && uc.key == key && uc.policy == p
		if !reused {
			sl.drop()
			conn, err := dial(r.Context())
			if err != nil {
				return nil, err
			}
			uc = &upstreamConn{key: key, policy: p, conn: conn,
				br: bufio.NewReaderSize(conn, 4096), bw: bufio.NewWriterSize(conn, 4096)}
			sl.conn.Store(uc)
		}
		d.setUpstream(uc.conn)
		resp, err := sendRequest(uc, r, responseHeader)
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

// sendRequest writes one request and reads its response header, skipping
// informational (1xx) answers, within responseHeader.
func sendRequest(uc *upstreamConn, r *http.Request, responseHeader time.Duration) (*http.Response, error) {
	if err := r.Write(uc.bw); err != nil {
		return nil, err
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, err
	}
	_ = uc.conn.SetReadDeadline(time.Now().Add(responseHeader))
	defer func() { _ = uc.conn.SetReadDeadline(time.Time{}) }()
	// A client that goes away stops the wait (its request's context ends).
	stop := context.AfterFunc(r.Context(), func() { _ = uc.conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		resp, err := http.ReadResponse(uc.br, r)
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
