package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// upstreamConn is a keep-alive connection to one upstream, owned by one
// client connection of the explicit listener: its plain-HTTP requests to
// the same host go over it, one after the other, in the goroutine that
// serves the client. Compared with http.Transport's pool it saves the
// hand-offs to the transport's reader and writer goroutines and a pool
// lookup per request, and it knows which address it dialled.
type upstreamConn struct {
	authority string  // host:port of the request target
	policy    *Policy // the policy its addresses were judged by
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
}

func (u *upstreamConn) close() {
	if u != nil {
		_ = u.conn.Close()
	}
}

// directEligible says whether a forwarded request can take the direct path:
// plain HTTP, on a connection of the explicit listener, not an upgrade and
// not waiting for 100-continue (http.Transport handles those).
func directEligible(r *http.Request) (*framingConn, bool) {
	fc, ok := r.Context().Value(connKey{}).(*framingConn)
	if !ok || r.URL.Scheme != "http" || r.Header.Get("Upgrade") != "" || r.Header.Get("Expect") != "" {
		return nil, false
	}
	return fc, true
}

// roundTripDirect sends r over the client connection's upstream connection,
// dialling one (through the guard) when there is none for r's host and
// policy. A request without a body is retried once on a fresh connection
// when a reused one turns out to be closed.
func (s *Server) roundTripDirect(fc *framingConn, r *http.Request, d *decision) (*http.Response, error) {
	p := policyFrom(r.Context(), s)
	addr := r.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(trimBrackets(addr), "80")
	}
	for attempt := 0; ; attempt++ {
		uc := fc.upstream.Load()
		reused := uc != nil && uc.authority == r.URL.Host && uc.policy == p
		if !reused {
			fc.dropUpstream()
			conn, err := s.dialUpstream(r.Context(), "tcp", addr)
			if err != nil {
				return nil, err
			}
			uc = &upstreamConn{authority: r.URL.Host, policy: p, conn: conn,
				br: bufio.NewReaderSize(conn, 4096), bw: bufio.NewWriterSize(conn, 4096)}
			fc.upstream.Store(uc)
		}
		d.setUpstream(uc.conn)
		resp, err := s.exchange(uc, r)
		if err == nil {
			resp.Body = &directBody{ReadCloser: resp.Body, fc: fc, uc: uc, keep: !resp.Close && !r.Close}
			return resp, nil
		}
		fc.dropUpstream()
		if !reused || attempt > 0 || !retryable(r, err) {
			return nil, err
		}
	}
}

// exchange writes one request and reads its response header, skipping
// informational (1xx) answers.
func (s *Server) exchange(uc *upstreamConn, r *http.Request) (*http.Response, error) {
	if err := r.Write(uc.bw); err != nil {
		return nil, err
	}
	if err := uc.bw.Flush(); err != nil {
		return nil, err
	}
	_ = uc.conn.SetReadDeadline(time.Now().Add(s.timeouts.ResponseHeader))
	defer func() { _ = uc.conn.SetReadDeadline(time.Time{}) }()
	for {
		resp, err := http.ReadResponse(uc.br, r)
		if err != nil {
			return nil, err
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
	fc   *framingConn
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
		b.fc.upstream.CompareAndSwap(b.uc, nil)
		b.uc.close()
	}
	return err
}
