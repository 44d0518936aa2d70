package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
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
	// bufs, if set, lends the buffers WriteTo copies the body with.
	bufs *copyBuffers
}

func (b *loggingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.d.addOut(int64(n))
	if err != nil && !errors.Is(err, io.EOF) && !(b.switched && errors.Is(err, net.ErrClosed)) {
		b.d.fail(bodyFailure(err, b.d.host))
	}
	return n, err
}

// WriteTo copies the body to w; goproxy's copy of a response to the
// client comes here (io.Copy prefers it to the ResponseWriter's ReadFrom).
// It starts with a small buffer and moves to a large one once the body has
// shown itself large: a bulk download then takes a few large reads and
// writes instead of many small ones, which is what its copy costs (system
// calls, not bytes), while a small answer costs what it did. Every byte
// still goes through Read, so it is counted, scrubbed where the body is
// scrubbed, and a failed read is recorded as before.
func (b *loggingBody) WriteTo(w io.Writer) (int64, error) {
	if b.bufs == nil {
		return io.Copy(w, struct{ io.Reader }{b})
	}
	small := b.bufs.small()
	buf := small[:]
	var large *[largeCopyBuffer]byte
	defer func() {
		if small != nil {
			b.bufs.putSmall(small)
		}
		if large != nil {
			b.bufs.putLarge(large)
		}
	}()
	var written int64
	for {
		if large == nil && written >= largeCopyAfter {
			if large = b.bufs.large(); large != nil {
				b.bufs.putSmall(small)
				small, buf = nil, large[:]
			}
		}
		nr, rerr := b.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			if nw < 0 || nw > nr {
				nw = 0
				if werr == nil {
					werr = errInvalidWrite
				}
			}
			written += int64(nw)
			if werr != nil {
				return written, werr
			}
			if nw != nr {
				return written, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}

// errInvalidWrite is io's own error for a writer that says it wrote more
// than it was given.
var errInvalidWrite = errors.New("invalid write result")

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

func wrapLoggingBody(body io.ReadCloser, d *decision, bufs *copyBuffers) io.ReadCloser {
	lb := loggingBody{ReadCloser: body, d: d, bufs: bufs}
	if w, ok := body.(io.Writer); ok {
		lb.switched = true
		return &loggingRWBody{loggingBody: lb, w: w}
	}
	return &lb
}

// Sizes of the buffers response bodies are copied to the client with.
const (
	// smallCopyBuffer is what every copy starts with: net/http's own
	// copy buffer size, which small answers never fill.
	smallCopyBuffer = 32 << 10
	// largeCopyBuffer is what a body that has proven large moves to.
	largeCopyBuffer = 1 << 20
	// largeCopyAfter is how much of a body is copied before it counts as
	// large.
	largeCopyAfter = 256 << 10
	// maxLargeCopyBuffers bounds the large buffers lent at once; copies
	// beyond it go on with their small buffer.
	maxLargeCopyBuffers = 16
)

// copyBuffers lends copy buffers: the small ones to tunnels (see relay)
// and to ReverseProxy, both kinds to WriteTo. Both kinds are pooled
// (sync.Pool), so that buffers idle through two garbage collections are
// given back to the system instead of being kept like a fixed free list
// would; the large ones are also counted, so that many concurrent
// downloads hold at most maxLargeCopyBuffers of them (16 MiB), which a
// sync.Pool alone would not bound. A copy that finds none free keeps its
// small buffer: slower, never blocked. The zero value is ready to use.
type copyBuffers struct {
	smallPool sync.Pool // *[smallCopyBuffer]byte
	largePool sync.Pool // *[largeCopyBuffer]byte
	largeOut  atomic.Int32
}

func (c *copyBuffers) small() *[smallCopyBuffer]byte {
	if p, ok := c.smallPool.Get().(*[smallCopyBuffer]byte); ok {
		return p
	}
	return new([smallCopyBuffer]byte)
}

func (c *copyBuffers) putSmall(p *[smallCopyBuffer]byte) { c.smallPool.Put(p) }

// large lends a large buffer, or nil when maxLargeCopyBuffers are lent.
func (c *copyBuffers) large() *[largeCopyBuffer]byte {
	if c.largeOut.Add(1) > maxLargeCopyBuffers {
		c.largeOut.Add(-1)
		return nil
	}
	if p, ok := c.largePool.Get().(*[largeCopyBuffer]byte); ok {
		return p
	}
	return new([largeCopyBuffer]byte)
}

func (c *copyBuffers) putLarge(p *[largeCopyBuffer]byte) {
	c.largePool.Put(p)
	c.largeOut.Add(-1)
}
