package proxy

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
)

// framingConn watches the request stream of one client connection for the
// shapes that request smuggling needs — a message with both Content-Length and
// Transfer-Encoding, or a header folded onto the next line (obs-fold) — which
// net/http quietly normalises (it drops Content-Length, it joins folded lines)
// instead of refusing. It follows the message framing itself (fixed-length
// and chunked bodies) so every request on a keep-alive connection is checked,
// not just the first.
//
// A header block is held back until it is complete, then checked. A bad one is
// replaced by rejectedRequest, which the handler answers with 400
// bad-request and Connection: close; nothing after it is read.
type framingConn struct {
	net.Conn
	maxHeader int

	state     framingState
	remaining int64  // bytes left in a fixed body or a chunk (incl. its CRLF)
	hold      []byte // header block or chunk-size/trailer line being collected
	out       []byte // checked bytes ready for the HTTP server
	readBuf   []byte
	rejection atomic.Pointer[string]

	// upstream is this client connection's keep-alive connection for
	// plain-HTTP forwarding (see roundTripDirect).
	upstream upstreamSlot
}

// Close closes the client connection and its upstream connection.
func (c *framingConn) Close() error {
	c.upstream.drop()
	return c.Conn.Close()
}

type framingState uint8

const (
	stateHeader framingState = iota
	stateFixedBody
	stateChunkSize
	stateChunkData
	stateTrailer
	statePassthrough // CONNECT, Upgrade or unparseable framing: net/http decides
	stateRejected
)

// rejectedRequest stands in for a refused header block. It is an origin-form
// request, so it can never be forwarded; the handler recognises the
// connection's rejection and answers 400.
const rejectedRequest = "GET /.hookgate/rejected HTTP/1.1\r\nHost: hookgate.invalid\r\nConnection: close\r\n\r\n"

func newFramingConn(c net.Conn, maxHeader int) *framingConn {
	return &framingConn{Conn: c, maxHeader: maxHeader}
}

// rejected returns the reason the connection's last header block was refused.
func (c *framingConn) rejected() (string, bool) {
	if p := c.rejection.Load(); p != nil {
		return *p, true
	}
	return "", false
}

func (c *framingConn) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			if len(c.out) == 0 {
				c.out = c.out[:0:0]
			}
			return n, nil
		}
		switch c.state {
		case statePassthrough:
			return c.Conn.Read(p)
		case stateRejected:
			// Nothing more is handed over, but an EOF now would make
			// net/http cancel a request still in flight on this
			// connection; wait for the client or the server to close.
			return c.discard()
		}
		if c.readBuf == nil {
			c.readBuf = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.readBuf)
		c.feed(c.readBuf[:n])
		if len(c.out) == 0 && err != nil {
			return 0, err
		}
	}
}

// NetConn returns the wrapped connection.
func (c *framingConn) NetConn() net.Conn { return c.Conn }

// pending is how many checked bytes wait to be read.
func (c *framingConn) pending() int { return len(c.out) }

// release drops the buffers of a connection that is now a raw tunnel and is
// read underneath the wrapper.
func (c *framingConn) release() {
	c.readBuf, c.hold, c.out = nil, nil, nil
}

func (c *framingConn) discard() (int, error) {
	var scratch [512]byte
	for {
		if _, err := c.Conn.Read(scratch[:]); err != nil {
			return 0, err
		}
	}
}

// feed advances the framing state machine over b, moving checked bytes to out.
func (c *framingConn) feed(b []byte) {
	for len(b) > 0 {
		switch c.state {
		case stateHeader:
			b = c.feedHeader(b)
		case stateFixedBody, stateChunkData:
			k := int64(len(b))
			if k > c.remaining {
				k = c.remaining
			}
			c.out = append(c.out, b[:k]...)
			b = b[k:]
			c.remaining -= k
			if c.remaining == 0 {
				if c.state == stateFixedBody {
					c.state = stateHeader
				} else {
					c.state = stateChunkSize
				}
			}
		case stateChunkSize, stateTrailer:
			b = c.feedLine(b)
		default: // passthrough or rejected: hand over what was read
			if c.state == statePassthrough {
				c.out = append(c.out, b...)
			}
			return
		}
	}
}

func (c *framingConn) feedHeader(b []byte) []byte {
	start := len(c.hold) - 3
	if start < 0 {
		start = 0
	}
	c.hold = append(c.hold, b...)
	end := headerEnd(c.hold, start)
	if end < 0 {
		if len(c.hold) > c.maxHeader {
			// Too large to hold: let net/http refuse it (431).
			c.out = append(c.out, c.hold...)
			c.hold = nil
			c.state = statePassthrough
		}
		return nil
	}
	block, rest := c.hold[:end], c.hold[end:]
	next, reason := judgeHeader(block)
	if reason != "" {
		c.rejection.Store(&reason)
		c.out = append(c.out, rejectedRequest...)
		c.hold = nil
		c.state = stateRejected
		return nil
	}
	c.out = append(c.out, block...)
	rest = append([]byte(nil), rest...)
	c.hold = c.hold[:0]
	c.state = next.state
	c.remaining = next.length
	if c.state == statePassthrough {
		c.out = append(c.out, rest...)
		return nil
	}
	return rest
}

// feedLine collects one chunk-size or trailer line.
func (c *framingConn) feedLine(b []byte) []byte {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		c.hold = append(c.hold, b...)
		c.out = append(c.out, b...)
		if len(c.hold) > 4096 {
			c.state = statePassthrough
		}
		return nil
	}
	c.hold = append(c.hold, b[:i+1]...)
	c.out = append(c.out, b[:i+1]...)
	line := bytes.TrimRight(c.hold, "\r\n")
	c.hold = c.hold[:0]
	if c.state == stateTrailer {
		if len(line) == 0 {
			c.state = stateHeader
		}
		return b[i+1:]
	}
	if semi := bytes.IndexByte(line, ';'); semi >= 0 {
		line = line[:semi]
	}
	size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
	switch {
	case err != nil || size < 0 || size > 1<<40:
		c.state = statePassthrough // net/http will refuse the body
	case size == 0:
		c.state = stateTrailer
	default:
		c.state = stateChunkData
		c.remaining = size + 2 // the data and its CRLF
	}
	return b[i+1:]
}

// headerEnd returns the index just past the blank line that ends a header
// block (CRLF CRLF, or bare LF LF as net/http also accepts), or -1.
func headerEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

type framing struct {
	state  framingState
	length int64
}

// judgeHeader checks one request header block and says how its body is
// framed. A non-empty reason refuses the request.
func judgeHeader(block []byte) (framing, string) {
	lines := bytes.Split(bytes.TrimRight(block, "\r\n"), []byte("\n"))
	requestLine := bytes.TrimSuffix(lines[0], []byte("\r"))
	if reason := judgeRequestLine(requestLine); reason != "" {
		return framing{}, reason
	}
	var (
		hosts         int
		contentLength = int64(-1)
		chunked       bool
		sawTE         bool
		upgrade       bool
	)
	for _, raw := range lines[1:] {
		line := bytes.TrimSuffix(raw, []byte("\r"))
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			return framing{}, "a header folded onto a continuation line (obs-fold) is not accepted"
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue // net/http refuses malformed lines itself
		}
		name := bytes.TrimSpace(line[:colon])
		value := bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return framing{state: statePassthrough}, ""
			}
			if contentLength >= 0 && contentLength != n {
				return framing{}, "conflicting Content-Length headers"
			}
			contentLength = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			sawTE = true
			chunked = bytes.EqualFold(lastToken(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Host")):
			if hosts++; hosts > 1 {
				return framing{}, "more than one Host header"
			}
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.Contains(bytes.ToLower(value), []byte("upgrade")) {
				upgrade = true
			}
		}
	}
	if sawTE && contentLength >= 0 {
		return framing{}, "both Content-Length and Transfer-Encoding are set"
	}
	switch {
	case bytes.HasPrefix(requestLine, []byte("CONNECT ")), upgrade:
		return framing{state: statePassthrough}, ""
	case sawTE && chunked:
		return framing{state: stateChunkSize}, ""
	case sawTE:
		return framing{state: statePassthrough}, ""
	case contentLength > 0:
		return framing{state: stateFixedBody, length: contentLength}, ""
	}
	return framing{state: stateHeader}, ""
}

// judgeRequestLine refuses request targets net/http would refuse with a
// bare 400 of its own, so that the client gets our machine-readable answer.
func judgeRequestLine(line []byte) string {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, _, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 || len(target) == 0 {
		return "" // not a request line net/http accepts either; it answers
	}
	if string(method) == "CONNECT" {
		if _, err := url.Parse("http://" + string(target)); err != nil {
			return fmt.Sprintf("malformed CONNECT target %q", target)
		}
		return ""
	}
	if target[0] == '/' || string(target) == "*" {
		return ""
	}
	if _, err := url.ParseRequestURI(string(target)); err != nil {
		return fmt.Sprintf("malformed request target %q", target)
	}
	return ""
}

func lastToken(v []byte) []byte {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.TrimSpace(v)
}
