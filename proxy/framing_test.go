package proxy

import (
	"bytes"
	"io"
	"net"
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

func readAllFraming(t *testing.T, stream string, oneByte bool) (string, *framingConn) {
	t.Helper()
	var r io.Reader = strings.NewReader(stream)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	fc := newFramingConn(&pipeConn{r: r}, 8192)
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
	for name, stream := range streams {
		for _, oneByte := range []bool{false, true} {
			got, fc := readAllFraming(t, stream, oneByte)
			if got != stream {
				t.Errorf("%s (oneByte=%v): stream altered:\n got %q\nwant %q", name, oneByte, got, stream)
			}
			if reason, bad := fc.rejected(); bad {
				t.Errorf("%s: rejected: %s", name, reason)
			}
		}
	}
}

func TestFramingRejectsSmugglingShapes(t *testing.T) {
	ok := "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	streams := map[string]string{
		"cl+te":           "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"te+cl odd case":  "POST http://a/ HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
		"obs-fold":        "GET http://a/ HTTP/1.1\r\nHost: a\r\nX: 1\r\n\t2\r\n\r\n",
		"two hosts":       "GET http://a/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"second request":  ok + "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"bad target":      "GET http://a%zz/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"bad connect":     "CONNECT a:+80 HTTP/1.1\r\nHost: a\r\n\r\n",
		"conflicting cls": "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
	}
	for name, stream := range streams {
		for _, oneByte := range []bool{false, true} {
			got, fc := readAllFraming(t, stream, oneByte)
			if _, bad := fc.rejected(); !bad {
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

func FuzzFraming(f *testing.F) {
	f.Add("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n")
	f.Add("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	f.Add("POST http://a/ HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n")
	f.Add("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n")
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
		if _, bad := fc.rejected(); bad {
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
	})
}
