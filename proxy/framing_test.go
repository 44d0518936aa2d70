package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// pipeConn is a net.Conn whose reads come from a fixed byte stream, chunked
// by the reader under test.
type pipeConn struct {
	net.Conn
	r io.Reader
}

func (c *pipeConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *pipeConn) SetReadDeadline(time.Time) error { return nil }

func readAllFraming(t *testing.T, stream string, oneByte bool) (string, *framingConn) {
	t.Helper()
	return readAllFramingConn(t, stream, oneByte, nil)
}

// readAllFramingConn reads a stream through a framingConn; prepare, if
// given, adjusts the framingConn first.
func readAllFramingConn(t *testing.T, stream string, oneByte bool, prepare func(*framingConn)) (string, *framingConn) {
	t.Helper()
	var r io.Reader = strings.NewReader(stream)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	fc := newFramingConn(&pipeConn{r: r}, 8192)
	if prepare != nil {
		prepare(fc)
	}
	var out bytes.Buffer
	buf := make([]byte, 7)
	for i := 0; i < 1_000_000; i++ {
		n, err := fc.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return out.String(), fc
}

func TestFramingPassesWellFormedStreams(t *testing.T) {
	streams := map[string]string{
		"keep-alive GETs": "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nGET http://a/2 HTTP/1.1\r\nHost: a\r\n\r\n",
		"fixed body then GET": "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello" +
			"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"chunked with extension and trailer": "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"5;x=y\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"body that looks like a bad header": "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\n\r\n" +
			"X: a\r\n b\r\nContent-Length: 1\r\nTransfer-E",
		"connect then raw bytes": "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n\x16\x03\x01 \r\n b\r\n\r\n",
	}
	hijack := func(fc *framingConn) { fc.connState(http.StateHijacked) } // the CONNECT's tunnel
	for name, stream := range streams {
		for _, oneByte := range []bool{false, true} {
			got, fc := readAllFramingConn(t, stream, oneByte, hijack)
			if got != stream {
				t.Errorf("%s (oneByte=%v): stream altered:\n got %q\nwant %q", name, oneByte, got, stream)
			}
			if den := fc.refusal(); den != nil {
				t.Errorf("%s: rejected: %s", name, den.reason)
			}
		}
	}
}

func TestFramingRejectsSmugglingShapes(t *testing.T) {
	ok := "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	streams := map[string]string{
		"cl+te":                           "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"te+cl odd case":                  "POST http://a/ HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
		"obs-fold":                        "GET http://a/ HTTP/1.1\r\nHost: a\r\nX: 1\r\n\t2\r\n\r\n",
		"two hosts":                       "GET http://a/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"second request":                  ok + "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"bad target":                      "GET http://a%zz/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"bad connect":                     "CONNECT a:+80 HTTP/1.1\r\nHost: a\r\n\r\n",
		"conflicting cls":                 "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		"bare lf":                         "GET http://a/ HTTP/1.1\nHost: a\r\n\r\n",
		"bare lf end":                     "GET http://a/ HTTP/1.1\r\nHost: a\n\n",
		"bare cr":                         "GET http://a/ HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n",
		"http/1.0 te":                     "POST http://a/ HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"te list":                         "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"te chunked twice":                "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"te identity":                     "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
		"signed cl":                       "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
		"space before colon":              "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length : 3\r\n\r\nabc",
		"http/0.9":                        "GET /\r\n",
		"http/2 line":                     "GET / HTTP/2.0\r\n",
		"double space":                    "GET  / HTTP/1.1\r\n",
		"nul in header":                   "GET http://a/ HTTP/1.1\r\nHost: a\r\nX: \x00\r\n\r\n",
		"bad chunk size in the same read": "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
	}
	for name, stream := range streams {
		for _, oneByte := range []bool{false, true} {
			if oneByte && strings.HasPrefix(name, "bad chunk size") {
				continue // the head is handed over before the chunk arrives: see TestFramingBadChunkAfterHead
			}
			got, fc := readAllFraming(t, stream, oneByte)
			if fc.refusal() == nil {
				t.Errorf("%s (oneByte=%v): not rejected", name, oneByte)
			}
			if !strings.HasSuffix(got, rejectedRequest) {
				t.Errorf("%s: stream does not end in the stand-in request: %q", name, got)
			}
			if name == "second request" && !strings.HasPrefix(got, ok) {
				t.Errorf("the first, good request was not passed on: %q", got)
			}
		}
	}
}

// TestFramingHoldsBytesBehindConnect: what follows a CONNECT or an Upgrade
// is handed over only to a hijacker (the tunnel); without a hijack the
// connection ends after that request, and net/http never parses those
// bytes as a request.
func TestFramingHoldsBytesBehindConnect(t *testing.T) {
	behind := "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	for _, head := range []string{
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"POST http://a/ HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nab",
	} {
		fc := newFramingConn(&pipeConn{r: strings.NewReader(head + behind)}, 8192)
		got := make([]byte, len(head))
		if _, err := io.ReadFull(fc, got); err != nil || string(got) != head {
			t.Fatalf("the head was not handed over: %q, %v", got, err)
		}
		// net/http's look-ahead while the handler runs gets nothing.
		if n, _ := fc.Read(make([]byte, 64)); n != 0 {
			t.Fatalf("bytes behind %q were handed over without a hijack", head)
		}
		fc.connState(http.StateIdle) // answered, not hijacked
		if n, err := fc.Read(make([]byte, 64)); n != 0 || err != io.EOF {
			t.Fatalf("after the answer: %d bytes, %v; want EOF", n, err)
		}
	}
}

// TestFramingTransferEncodingSpellings: the transfer-coding name is
// case-insensitive and may carry whitespace around it, as net/http reads it;
// the checker follows the chunked body of each spelling.
func TestFramingTransferEncodingSpellings(t *testing.T) {
	for _, te := range []string{"chunked", "CHUNKED", "Chunked", "\tchunked", "chunked\t", " chunked "} {
		stream := "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:" + te + "\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
			"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"
		for _, oneByte := range []bool{false, true} {
			got, fc := readAllFraming(t, stream, oneByte)
			if den := fc.refusal(); den != nil || got != stream {
				t.Errorf("TE %q (oneByte=%v): refused %v; stream altered=%v", te, oneByte, den, got != stream)
			}
			if fc.heads != 2 {
				t.Errorf("TE %q: %d requests followed, want 2", te, fc.heads)
			}
		}
	}
}

// TestFramingHeaderLimit: a header block of exactly the limit passes; one
// byte more is refused with 431, before its end arrives.
func TestFramingHeaderLimit(t *testing.T) {
	const limit = 1000
	head := func(size int) string {
		base := "GET http://a/ HTTP/1.1\r\nHost: a\r\nX-Pad: \r\n\r\n"
		return strings.Replace(base, "X-Pad: ", "X-Pad: "+strings.Repeat("p", size-len(base)), 1)
	}
	run := func(stream string) *framingConn {
		fc := newFramingConn(&pipeConn{r: strings.NewReader(stream)}, limit)
		_, _ = io.Copy(io.Discard, fc)
		return fc
	}
	if fc := run(head(limit)); fc.refusal() != nil || fc.heads != 1 {
		t.Fatalf("a header block of exactly %d bytes was refused: %v", limit, fc.refusal())
	}
	fc := run(head(limit + 1))
	if den := fc.refusal(); den == nil || den.status != 431 {
		t.Fatalf("a header block of %d bytes: want 431, got %+v", limit+1, den)
	}
	// No blank line ever comes: refused as soon as the limit is passed.
	fc = run("GET http://a/ HTTP/1.1\r\nX: " + strings.Repeat("p", limit))
	if den := fc.refusal(); den == nil || den.status != 431 {
		t.Fatalf("an endless header block: want 431, got %+v", den)
	}
}

// TestFramingBadChunkAfterHead: a malformed chunk that arrives after its
// header block was handed over fails the connection's reads, so the request
// body being forwarded ends in an error and never completes.
func TestFramingBadChunkAfterHead(t *testing.T) {
	for name, body := range map[string]string{
		"bad size":       "3\r\nabc\r\nzz\r\n",
		"bare lf":        "3\nabc\r\n0\r\n\r\n",
		"data too long":  "3\r\nabcd\r\n0\r\n\r\n",
		"long line":      "3;" + strings.Repeat("x", 2000) + "\r\nabc\r\n0\r\n\r\n",
		"bad trailer":    "3\r\nabc\r\n0\r\nX\r\n\r\n",
		"folded trailer": "3\r\nabc\r\n0\r\nX: 1\r\n 2\r\n\r\n",
	} {
		stream := "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + body
		fc := newFramingConn(&pipeConn{r: iotest.OneByteReader(strings.NewReader(stream))}, 8192)
		req, err := http.ReadRequest(bufio.NewReader(fc))
		if err != nil {
			t.Fatalf("%s: the head did not pass: %v", name, err)
		}
		if _, err := io.ReadAll(req.Body); err == nil || fc.err != errBadBody {
			t.Errorf("%s: body read ended with %v (checker: %v), want an error", name, err, fc.err)
		}
	}
}

// TestFramingSkipsCRLFAfterPOST: net/http skips up to four CR/LF bytes after
// a POST before the next request line; the checker skips exactly those.
func TestFramingSkipsCRLFAfterPOST(t *testing.T) {
	stream := "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx\r\n" +
		"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"
	got, fc := readAllFraming(t, stream, true)
	if fc.refusal() != nil || got != stream || fc.heads != 2 {
		t.Fatalf("refusal %v, heads %d, altered %v", fc.refusal(), fc.heads, got != stream)
	}
}

// parsedHead is one request as net/http's server would read it from a
// stream: the exact bytes of its header block.
type parsedHead struct {
	head       string
	standIn    bool
	bodyFailed bool
}

// parseLikeServer reads requests from r the way net/http's server loop does
// (skipping CR/LF after a POST, reading each body to its end) until a parse
// error, a failed body, the stand-in, or stop says the connection ends.
func parseLikeServer(r io.Reader, stop func(n int) bool) []parsedHead {
	var seen bytes.Buffer
	cr := &countingReader{r: io.TeeReader(r, &seen)}
	br := bufio.NewReaderSize(cr, 4096)
	var out []parsedHead
	lastMethod := ""
	for len(out) < 1000 {
		if lastMethod == http.MethodPost {
			peek, _ := br.Peek(4)
			_, _ = br.Discard(numLeadingCRorLF(peek))
		}
		start := cr.n - int64(br.Buffered())
		req, err := http.ReadRequest(br)
		if err != nil {
			return out
		}
		end := cr.n - int64(br.Buffered())
		head := seen.String()[start:end]
		p := parsedHead{head: head, standIn: head == rejectedRequest}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			p.bodyFailed = true
		}
		out = append(out, p)
		lastMethod = req.Method
		if p.standIn || p.bodyFailed || req.ProtoMajor != 1 || req.Close || stop(len(out)) {
			return out
		}
	}
	return out
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// checkAgreement feeds stream through the checker and parses its output as
// net/http's server would: every request net/http reads must be one whose
// header block the checker judged, byte for byte, in the same order —
// until the checker ends the connection.
func checkAgreement(t *testing.T, stream string, oneByte bool) {
	t.Helper()
	var r io.Reader = strings.NewReader(stream)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	fc := newFramingConn(&pipeConn{r: r}, 8192)
	var judged []string
	fc.onHead = func(block []byte) { judged = append(judged, string(block)) }
	parsed := parseLikeServer(fc, func(n int) bool {
		after := fc.closeAfter.Load()
		return after > 0 && int64(n) >= after
	})
	for i, p := range parsed {
		if p.standIn {
			if fc.refusal() == nil {
				t.Fatalf("the stand-in request reached the parser without a refusal: %q", stream)
			}
			return
		}
		if i >= len(judged) || judged[i] != p.head {
			t.Fatalf("net/http read request %d as %q, the checker judged %q (oneByte=%v)\nstream %q", i, p.head, judged, oneByte, stream)
		}
	}
}

func TestFramingAgreesWithNetHTTP(t *testing.T) {
	for _, stream := range framingSeeds {
		checkAgreement(t, stream, false)
		checkAgreement(t, stream, true)
	}
}

var framingSeeds = []string{
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\nPOST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\nPOST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
	"POST http://a/ HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx\r\n\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nabGET http://a/ HTTP/1.0\r\n\r\n",
	"T p: HTTP/1.1\r\nTransfer-Encoding:chunked\r\n\r\n\n", // a chunk-size line that is a bare LF
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
}

func FuzzFraming(f *testing.F) {
	f.Add("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n")
	f.Add("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	f.Add("POST http://a/ HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n")
	f.Add("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n")
	for _, seed := range framingSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, stream string) {
		var got string
		var fc *framingConn
		done := make(chan struct{})
		go func() { got, fc = readAllFraming(t, stream, false); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("framing hangs on %q", stream)
		}
		if fc.refusal() != nil {
			if !strings.HasSuffix(got, rejectedRequest) {
				t.Fatalf("rejected stream does not end in the stand-in: %q", got)
			}
			return
		}
		// Not rejected: every byte passes through unchanged, except that a
		// header block still being collected at EOF is never released.
		if !strings.HasPrefix(stream, got) {
			t.Fatalf("stream altered:\n got %q\nwant prefix of %q", got, stream)
		}
		checkAgreement(t, stream, false)
		checkAgreement(t, stream, true)
	})
}
