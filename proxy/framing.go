package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// framingConn watches the request stream of one client connection (explicit
// listener, transparent plain HTTP, and the decrypted stream inside an
// intercepted tunnel) for the shapes that request smuggling needs — both
// Content-Length and Transfer-Encoding, a header folded onto the next line,
// a bare LF, a Transfer-Encoding net/http would ignore or refuse — which
// net/http would quietly normalise instead of refusing. It follows the
// message framing itself (fixed-length and chunked bodies) so every request on
// a keep-alive connection is checked, not just the first.
//
// The rule it keeps: it and net/http never disagree on where a request
// starts. Where it cannot follow the stream (CONNECT, an Upgrade, h2c's
// preface) the connection ends after that request unless it became a tunnel;
// a body it cannot follow ends the connection.
//
// A header block is held back until it is complete, then checked; the bytes
// of the same read behind it (the start of its body) are checked too before
// any of it is handed over. A bad block is replaced by rejectedRequest, which
// the handler answers with the connection's refusal (400 bad-request, or
// 431 for a header block over the limit) and Connection: close; nothing after
// it is read. A chunked body found malformed after its header block was
// handed over cannot be answered any more: the connection's reads fail from
// there on, so the request body the handler is forwarding ends in an error
// and its upstream connection is closed before the request is complete.
type framingConn struct {
	net.Conn
	maxHeader int // the most bytes a header block may have, blank line included

	state     framingState
	remaining int64  // bytes left in a fixed body or chunk
	hold      []byte // header block, chunk-size or trailer line being collected
	scanned   int    // bytes of hold already checked for stray CR and LF
	lineOK    bool   // the request line in hold was checked
	out       []byte // checked bytes ready for the HTTP server
	held      []byte // bytes behind a CONNECT or Upgrade, for the tunnel if there is one
	headAt    int    // where the current request's head starts in out; -1 once handed over
	readBuf   []byte
	afterPOST bool  // net/http skips up to 4 CR/LF bytes before the next request
	excess    int64 // chunk overhead, counted as net/http counts it
	trailer   int   // bytes of the trailer section so far
	err       error // sticky: the body could not be followed
	rejection atomic.Pointer[denial]

	heads      int          // header blocks handed on
	closeAfter atomic.Int64 // end the connection after this many requests; 0: never
	served     atomic.Int64 // requests finished with the connection kept (StateIdle)
	ending     atomic.Bool  // no further request is read: reads end with EOF
	hijacked   atomic.Bool  // net/http handed the connection over (a tunnel)
	lastReq    bool         // the request being followed is the last one
	abandoned  atomic.Bool  // the body will not be read: reads end with EOF now
	drained    bool         // end has half-closed and drained the connection

	// upstream is this client connection's keep-alive connection for
	// plain-HTTP forwarding (see forwardUpstream).
	upstream upstreamSlot

	// onHead, if set, sees every header block handed on (the fuzz test
	// compares them with what net/http parses).
	onHead func(block []byte)
}

// Close closes the client connection and its upstream connection.
func (c *framingConn) Close() error {
	c.upstream.drop()
	return c.Conn.Close()
}

// CloseWrite half-closes the client connection, so that net/http's graceful
// close (FIN, then a wait for the client) works through the wrapper.
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type framingState uint8

const (
	stateHeader framingState = iota
	stateFixedBody
	stateChunkSize
	stateChunkData
	stateChunkEnd // the CRLF behind a chunk's data
	stateTrailer
	stateHeld        // after CONNECT, Upgrade, h2c preface: bytes held until the connection is hijacked
	statePassthrough // a hijacked connection: a tunnel
	stateRejected
	stateFailed
)

// Limits of the body framing the checker follows. They are tighter than
// net/http's, so that the checker gives up first, never later.
const (
	maxChunkLine   = 1024     // a chunk-size line, CRLF included (net/http: 4096)
	maxTrailer     = 1024     // the trailer section (net/http: about 4096)
	maxChunkSize   = 1 << 40  // net/http: 16 hex digits
	maxChunkExcess = 16 << 10 // chunk overhead beyond 16 bytes + twice the data, as net/http
	maxCLDigits    = 18
)

// rejectedRequest stands in for a refused header block. It is an origin-form
// request, so it can never be forwarded; the handler recognises the
// connection's rejection and answers it.
const rejectedRequest = "GET /.hookgate/rejected HTTP/1.1\r\nHost: hookgate.invalid\r\nConnection: close\r\n\r\n"

// errHeldTooMuch ends a connection whose client sends more behind a CONNECT
// or Upgrade, before the answer, than a tunnel's start plausibly needs.
var errHeldTooMuch = errors.New("proxy: too many bytes before the tunnel opened")

const maxHeldBytes = 256 << 10

// errBadBody fails the reads of a connection whose chunked body turned out
// malformed after its header block was handed over.
var errBadBody = errors.New("proxy: malformed chunked request body; connection closed")

func newFramingConn(c net.Conn, maxHeader int) *framingConn {
	return &framingConn{Conn: c, maxHeader: maxHeader, headAt: -1}
}

// refusal returns the answer to the connection's refused header block, or nil.
func (c *framingConn) refusal() *denial { return c.rejection.Load() }

// refusalFor returns the answer to r if r is the stand-in for a refused
// header block (requests before it on the connection are served as usual).
func (c *framingConn) refusalFor(r *http.Request) *denial {
	if c == nil {
		return nil
	}
	d := c.refusal()
	if d == nil || r.Host != "hookgate.invalid" || r.URL.Path != "/.hookgate/rejected" {
		return nil
	}
	return d
}

// requestDone is told that net/http finished a request and keeps the
// connection for the next one (http.StateIdle).
func (c *framingConn) requestDone() {
	n := c.served.Add(1)
	if after := c.closeAfter.Load(); after > 0 && n >= after {
		c.ending.Store(true)
	}
}

// abandon ends the request stream now: the handler answered a request whose
// body the client will only send after 100 Continue, which it never got; net/http
// would otherwise wait for that body before closing.
func (c *framingConn) abandon() { c.abandoned.Store(true) }

func (c *framingConn) Read(p []byte) (int, error) {
	for {
		if c.abandoned.Load() {
			return 0, io.EOF
		}
		if c.ending.Load() {
			return c.end() // bytes held for a request net/http will not read
		}
		if len(c.out) == 0 && c.state == stateHeld {
			if !c.hijacked.Load() {
				return c.holdBack()
			}
			c.out, c.held = c.held, nil
			c.state = statePassthrough
			continue
		}
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			if len(c.out) == 0 {
				c.out = c.out[:0:0]
			}
			if c.headAt >= 0 {
				if n > c.headAt {
					c.headAt = -1
				} else {
					c.headAt -= n
				}
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
		case stateFailed:
			return 0, c.err
		}
		if c.readBuf == nil {
			c.readBuf = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.readBuf)
		c.feed(c.readBuf[:n])
		if len(c.out) == 0 && err != nil && c.state != stateFailed {
			return 0, err
		}
	}
}

// end closes a connection the checker cannot follow past its last request:
// FIN after the answer, a short wait for the client's bytes so that closing
// does not reset the connection under the answer, then EOF for net/http.
func (c *framingConn) end() (int, error) {
	if !c.drained {
		c.drained = true
		_ = c.CloseWrite()
		_ = c.Conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c.Conn, 256<<10)
	}
	return 0, io.EOF
}

// holdBack reads what the client sends behind a request the checker cannot
// follow (CONNECT, Upgrade) without handing it to net/http, whose reads
// here are its look-ahead for a next request: if the handler hijacks the
// connection, the tunnel gets these bytes; if not, the connection ends.
// net/http ends such a read by setting a past deadline.
func (c *framingConn) holdBack() (int, error) {
	if c.readBuf == nil {
		c.readBuf = make([]byte, 4096)
	}
	for !c.hijacked.Load() && !c.ending.Load() {
		if len(c.held) > maxHeldBytes {
			return 0, errHeldTooMuch
		}
		n, err := c.Conn.Read(c.readBuf)
		c.held = append(c.held, c.readBuf[:n]...)
		if err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// connState is told of net/http's connection states: a finished request
// (the connection kept for the next one), or a hijack.
func (c *framingConn) connState(st http.ConnState) {
	switch st {
	case http.StateIdle:
		c.requestDone()
	case http.StateHijacked:
		c.hijacked.Store(true)
	}
}

// NetConn returns the wrapped connection.
func (c *framingConn) NetConn() net.Conn { return c.Conn }

// pending is how many bytes wait to be read.
func (c *framingConn) pending() int { return len(c.out) + len(c.held) }

// release drops the buffers of a connection that is now a raw tunnel and is
// read underneath the wrapper.
func (c *framingConn) release() {
	c.readBuf, c.hold, c.out, c.held = nil, nil, nil, nil
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
			k := min(int64(len(b)), c.remaining)
			c.out = append(c.out, b[:k]...)
			b = b[k:]
			c.remaining -= k
			if c.remaining == 0 {
				if c.state == stateFixedBody {
					c.requestEnds()
				} else {
					c.state = stateChunkEnd
				}
			}
		case stateChunkEnd, stateChunkSize, stateTrailer:
			b = c.feedLine(b)
		case statePassthrough:
			c.out = append(c.out, b...)
			return
		case stateHeld:
			c.held = append(c.held, b...)
			return
		default: // rejected or failed: nothing more is handed over
			return
		}
	}
}

func (c *framingConn) requestEnds() {
	c.state = stateHeader
	if c.lastReq {
		c.state = stateHeld
	}
	c.headAt = -1
}

func (c *framingConn) feedHeader(b []byte) []byte {
	c.hold = append(c.hold, b...)
	if c.afterPOST {
		// net/http peeks 4 bytes after a POST and skips the CRs and LFs
		// among them (tolerance for old clients); skip exactly those.
		if len(c.hold) < 4 {
			return nil
		}
		n := numLeadingCRorLF(c.hold[:4])
		c.out = append(c.out, c.hold[:n]...)
		c.hold = append(c.hold[:0], c.hold[n:]...)
		c.afterPOST = false
	}
	end, reason := c.scanHead()
	if reason != "" {
		c.reject(badRequest("", "%s", reason))
		return nil
	}
	if !c.lineOK {
		i := bytes.Index(c.hold[:c.scanned], []byte("\r\n"))
		if i < 0 {
			c.checkHeaderSize(len(c.hold))
			return nil
		}
		if reason := judgeRequestLine(c.hold[:i]); reason != "" {
			c.reject(badRequest("", "%s", reason))
			return nil
		}
		c.lineOK = true
	}
	if end < 0 {
		c.checkHeaderSize(len(c.hold))
		return nil
	}
	if !c.checkHeaderSize(end) {
		return nil
	}
	block := c.hold[:end]
	next, den := judgeHeader(block)
	if den != nil {
		c.reject(den)
		return nil
	}
	if c.onHead != nil {
		c.onHead(block)
	}
	c.heads++
	c.headAt = len(c.out)
	c.out = append(c.out, block...)
	rest := append([]byte(nil), c.hold[end:]...)
	c.hold, c.scanned, c.lineOK = c.hold[:0], 0, false
	c.afterPOST = next.post
	c.state, c.remaining, c.excess, c.trailer = next.state, next.length, 0, 0
	if next.last {
		c.lastReq = true
		c.closeAfter.Store(int64(c.heads))
	}
	if c.state == stateHeader {
		c.requestEnds()
	}
	return rest
}

// scanHead checks the bytes of the header block collected so far, as they
// arrive: it refuses a CR not followed by LF, an LF not preceded by CR
// (net/http accepts a bare LF as a line end; a peer may not) and control
// bytes. It returns the end of the block (past its blank line), or -1.
func (c *framingConn) scanHead() (int, string) {
	h := c.hold
	for ; c.scanned < len(h); c.scanned++ {
		i := c.scanned
		switch ch := h[i]; {
		case ch == '\r':
			if i+1 == len(h) {
				return -1, "" // its LF may be in the next read
			}
			if h[i+1] != '\n' {
				return -1, "a CR not followed by LF in the request header"
			}
		case ch == '\n':
			if i == 0 || h[i-1] != '\r' {
				return -1, "a bare LF line ending in the request header (lines end in CRLF)"
			}
			if i >= 3 && h[i-2] == '\n' {
				c.scanned = i + 1
				return i + 1, ""
			}
		case ch == '\t':
		case ch < 0x20 || ch == 0x7f:
			return -1, fmt.Sprintf("control character 0x%02x in the request header", ch)
		}
	}
	return -1, ""
}

// checkHeaderSize refuses a header block over the limit (431), as soon as it
// is certain, and says whether the block is within it.
func (c *framingConn) checkHeaderSize(n int) bool {
	if n <= c.maxHeader {
		return true
	}
	c.reject(deny(CodeClientHeaderTooLarge, http.StatusRequestHeaderFieldsTooLarge, "",
		"the request header is larger than %d bytes", c.maxHeader))
	return false
}

func (c *framingConn) reject(den *denial) {
	c.rejection.Store(den)
	c.out = append(c.out, rejectedRequest...)
	c.hold, c.readBuf = nil, nil
	c.state = stateRejected
}

// badBody handles a malformed chunked body: refused with 400 while its
// header block is still held here, or else the end of the connection.
func (c *framingConn) badBody(reason string) {
	if c.headAt >= 0 {
		c.out = c.out[:c.headAt]
		c.reject(badRequest("", "malformed chunked body: %s", reason))
		return
	}
	c.out, c.hold, c.readBuf = nil, nil, nil
	c.err = errBadBody
	c.state = stateFailed
}

// feedLine collects one chunk-size line, chunk-data end or trailer line.
func (c *framingConn) feedLine(b []byte) []byte {
	limit := maxChunkLine
	switch c.state {
	case stateChunkEnd:
		limit = 2
	case stateTrailer:
		limit = maxTrailer - c.trailer
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		c.hold = append(c.hold, b...)
		if len(c.hold) >= limit {
			c.badBody("line too long")
		}
		return nil
	}
	c.hold = append(c.hold, b[:i+1]...)
	rest := b[i+1:]
	line := c.hold
	c.hold = c.hold[:0]
	if len(line) > limit {
		c.badBody("line too long")
		return nil
	}
	if len(line) < 2 || bytes.IndexByte(line, '\r') != len(line)-2 {
		c.badBody("a chunk line must end in CRLF, with no other CR")
		return nil
	}
	if reason := c.judgeLine(line[:len(line)-2]); reason != "" {
		c.badBody(reason)
		return nil
	}
	c.out = append(c.out, line...)
	return rest
}

// judgeLine checks one line of a chunked body (without its CRLF) the way
// net/http's reader does, or more strictly, and advances the state.
func (c *framingConn) judgeLine(line []byte) string {
	switch c.state {
	case stateChunkEnd:
		if len(line) != 0 {
			return "chunk data longer than its size"
		}
		c.state = stateChunkSize
	case stateTrailer:
		c.trailer += len(line) + 2
		if len(line) == 0 {
			c.requestEnds()
			return ""
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "a folded trailer line"
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return "a malformed trailer line"
		}
		for _, ch := range line {
			if ch != '\t' && (ch < 0x20 || ch == 0x7f) {
				return "a control character in a trailer"
			}
		}
	default:
		c.excess += int64(len(line)) + 2
		size, ok := parseChunkSize(line)
		if !ok {
			return "bad chunk size"
		}
		c.excess = max(c.excess-16-2*size, 0)
		if c.excess > maxChunkExcess {
			return "too much chunk overhead"
		}
		if size == 0 {
			c.state = stateTrailer
		} else {
			c.state, c.remaining = stateChunkData, size
		}
	}
	return ""
}

// parseChunkSize reads a chunk-size line as net/http does: trailing
// whitespace dropped, then any extension, then 1 to 16 hex digits.
func parseChunkSize(line []byte) (int64, bool) {
	line = bytes.TrimRight(line, " \t")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	if len(line) == 0 || len(line) > 16 {
		return 0, false
	}
	var n int64
	for _, ch := range line {
		var d byte
		switch {
		case '0' <= ch && ch <= '9':
			d = ch - '0'
		case 'a' <= ch && ch <= 'f':
			d = ch - 'a' + 10
		case 'A' <= ch && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
		if n > maxChunkSize {
			return 0, false
		}
	}
	return n, true
}

func numLeadingCRorLF(v []byte) int {
	n := 0
	for _, b := range v {
		if b != '\r' && b != '\n' {
			break
		}
		n++
	}
	return n
}

// framing is how a checked request's body is framed.
type framing struct {
	state  framingState
	length int64
	post   bool // a POST: net/http skips CRs and LFs before the next request
	last   bool // the checker cannot follow past this request
}

// judgeHeader checks one request header block (CRLF line ends, no control
// bytes: scanLineEnds saw to it) and says how its body is framed. A non-nil
// denial refuses the request.
func judgeHeader(block []byte) (framing, *denial) {
	// The lines are taken one by one (no slice of them is built: this
	// runs on every request).
	requestLine, rest, more := bytes.Cut(block[:len(block)-4], []byte("\r\n"))
	method, _, _ := bytes.Cut(requestLine, []byte(" "))
	http10 := bytes.HasSuffix(requestLine, []byte(" HTTP/1.0"))
	var (
		hosts         int
		contentLength []byte
		haveCL        bool
		tes           int
		upgrade       bool
	)
	for more {
		var line []byte
		line, rest, more = bytes.Cut(rest, []byte("\r\n"))
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			return framing{}, badRequest("", "a header folded onto a continuation line (obs-fold) is not accepted")
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return framing{}, badRequest("", "malformed header line %q", truncate(line, 40))
		}
		name := line[:colon]
		value := bytes.Trim(line[colon+1:], " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if !isDigits(value) || len(value) > maxCLDigits {
				return framing{}, badRequest("", "invalid Content-Length %q", truncate(value, 20))
			}
			if haveCL && !bytes.Equal(contentLength, value) {
				return framing{}, badRequest("", "conflicting Content-Length headers")
			}
			contentLength, haveCL = value, true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			tes++
			if !bytes.EqualFold(value, []byte("chunked")) {
				return framing{}, badRequest("", "Transfer-Encoding %q is not supported; only chunked", truncate(value, 40))
			}
		case bytes.EqualFold(name, []byte("Host")):
			if hosts++; hosts > 1 {
				return framing{}, badRequest("", "more than one Host header")
			}
		case bytes.EqualFold(name, []byte("Connection")):
			upgrade = upgrade || hasToken(value, "upgrade")
		case bytes.EqualFold(name, []byte("Upgrade")):
			upgrade = true
		}
	}
	switch {
	case tes > 0 && haveCL:
		return framing{}, badRequest("", "both Content-Length and Transfer-Encoding are set")
	case tes > 1:
		return framing{}, badRequest("", "more than one Transfer-Encoding header")
	case tes > 0 && http10:
		return framing{}, badRequest("", "Transfer-Encoding on an HTTP/1.0 request")
	}
	f := framing{state: stateHeader, post: string(method) == http.MethodPost}
	f.last = string(method) == http.MethodConnect || string(method) == "PRI" || upgrade
	switch {
	case tes > 0:
		f.state = stateChunkSize
	case haveCL && parseDigits(contentLength) > 0:
		f.state, f.length = stateFixedBody, parseDigits(contentLength)
	}
	return f, nil
}

// judgeRequestLine accepts "METHOD SP target SP HTTP/1.x" only (the h2c
// preface "PRI * HTTP/2.0" is left to net/http), refusing the rest — an
// HTTP/0.9 line, extra spaces, other versions — at once, before the header
// block is complete. It also refuses request targets net/http would refuse
// with a bare 400 of its own, so that the client gets our machine-readable
// answer.
func judgeRequestLine(line []byte) string {
	methodB, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, versionB, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || bytes.IndexByte(versionB, ' ') >= 0 || len(target) == 0 || !isToken(methodB) {
		return fmt.Sprintf("malformed request line %q: want METHOD target HTTP/1.1", truncate(line, 60))
	}
	method, version := string(methodB), string(versionB)
	switch {
	case method == "PRI" && string(target) == "*" && version == "HTTP/2.0":
		return ""
	case version != "HTTP/1.1" && version != "HTTP/1.0":
		return fmt.Sprintf("unsupported protocol version %q", truncate(versionB, 20))
	}
	if method == http.MethodConnect {
		if _, err := url.Parse("http://" + string(target)); err != nil {
			return fmt.Sprintf("malformed CONNECT target %q", truncate(target, 60))
		}
		return ""
	}
	if target[0] == '/' || string(target) == "*" {
		return ""
	}
	if _, err := url.ParseRequestURI(string(target)); err != nil {
		return fmt.Sprintf("malformed request target %q", truncate(target, 60))
	}
	return ""
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// isToken reports whether b is an RFC 9110 token (a method or header name).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, ch := range b {
		if !isTokenChar(ch) {
			return false
		}
	}
	return true
}

func isTokenChar(ch byte) bool {
	switch {
	case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9':
		return true
	}
	return bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), ch) >= 0
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return true
}

func parseDigits(b []byte) int64 {
	var n int64
	for _, ch := range b {
		n = n*10 + int64(ch-'0')
	}
	return n
}

// hasToken reports whether a comma-separated header value holds token.
func hasToken(v []byte, token string) bool {
	for more := true; more; {
		var t []byte
		t, v, more = bytes.Cut(v, []byte(","))
		if bytes.EqualFold(bytes.Trim(t, " \t"), []byte(token)) {
			return true
		}
	}
	return false
}
