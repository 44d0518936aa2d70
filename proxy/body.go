package proxy

import (
	"errors"
	"io"
	"net"
)

// loggingBody counts the response bytes read through it and writes the
// request's decision line when it is closed, which is when goproxy has
// finished copying it to the client. A read that fails (the upstream reset
// the connection or closed it short of the body's length) makes the line an
// error: the client got the status, but not the whole body.
type loggingBody struct {
	io.ReadCloser
	d *decision
	// switched: the body is a switched (WebSocket) connection, which ends
	// when either side closes it; a read on the side closed by the other's
	// end (net.ErrClosed) is that end, not a failure.
	switched bool
}

func (b *loggingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.d.addOut(int64(n))
	if err != nil && !errors.Is(err, io.EOF) && !(b.switched && errors.Is(err, net.ErrClosed)) {
		b.d.fail(bodyFailure(err, b.d.host))
	}
	return n, err
}

func (b *loggingBody) Close() error {
	err := b.ReadCloser.Close()
	b.d.finish()
	return err
}

// loggingRWBody is loggingBody for a 101 Switching Protocols body, which
// goproxy writes to as well (websockets).
type loggingRWBody struct {
	loggingBody
	w io.Writer
}

func (b *loggingRWBody) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	b.d.addIn(int64(n))
	return n, err
}

func wrapLoggingBody(body io.ReadCloser, d *decision) io.ReadCloser {
	lb := loggingBody{ReadCloser: body, d: d}
	if w, ok := body.(io.Writer); ok {
		lb.switched = true
		return &loggingRWBody{loggingBody: lb, w: w}
	}
	return &lb
}
