package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hookgate/hookgate/config"
)

// readSizes is a body that serves n bytes of a pattern and records how
// large each read asked for was; fail, if set, ends it with that error
// instead of EOF.
type readSizes struct {
	left  int
	next  byte
	sizes []int
	fail  error
}

func (r *readSizes) Read(p []byte) (int, error) {
	r.sizes = append(r.sizes, len(p))
	if r.left == 0 {
		if r.fail != nil {
			return 0, r.fail
		}
		return 0, io.EOF
	}
	n := min(len(p), r.left)
	for i := range p[:n] {
		p[i] = r.next
		r.next++
	}
	r.left -= n
	return n, nil
}

func (r *readSizes) Close() error { return nil }

// copyThrough copies body to the end through a loggingBody's WriteTo
// with bufs, and returns what arrived, the line and the copy's error.
func copyThrough(t *testing.T, body io.ReadCloser, bufs *copyBuffers) ([]byte, Record, error) {
	t.Helper()
	var rec []Record
	k := &sink{}
	k.observer.Decision = func(r Record) { rec = append(rec, r) }
	d := newDecision(k, "192.0.2.1:1", modeHTTP)
	d.status = 200
	lb := wrapLoggingBody(body, d, bufs)
	var out bytes.Buffer
	n, err := io.Copy(struct{ io.Writer }{&out}, lb)
	if n != int64(out.Len()) {
		t.Errorf("the copy says %d bytes, %d arrived", n, out.Len())
	}
	_ = lb.Close()
	if len(rec) != 1 {
		t.Fatalf("%d decision lines, want 1", len(rec))
	}
	return out.Bytes(), rec[0], err
}

func checkPattern(t *testing.T, got []byte, want int) {
	t.Helper()
	if len(got) != want {
		t.Fatalf("%d bytes arrived, want %d", len(got), want)
	}
	for i, b := range got {
		if b != byte(i) {
			t.Fatalf("byte %d is %d, want %d", i, b, byte(i))
		}
	}
}

// TestBodyCopyMovesToLargeBuffer: a large body is read with the small
// buffer until largeCopyAfter bytes have been copied, then with a large
// one; every byte arrives, in order, and is counted on the line.
func TestBodyCopyMovesToLargeBuffer(t *testing.T) {
	const size = largeCopyAfter + 3*largeCopyBuffer + 17
	src := &readSizes{left: size}
	var bufs copyBuffers
	got, rec, err := copyThrough(t, src, &bufs)
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, got, size)
	if rec.BytesOut != size || rec.Code != "" {
		t.Errorf("line: bytes_out %d code %q, want %d and none", rec.BytesOut, rec.Code, size)
	}
	small := largeCopyAfter / smallCopyBuffer
	for i, n := range src.sizes {
		want := largeCopyBuffer
		if i < small {
			want = smallCopyBuffer
		}
		if n != want {
			t.Fatalf("read %d asked for %d bytes, want %d (reads: %v)", i, n, want, src.sizes)
		}
	}
	if out := bufs.largeOut.Load(); out != 0 {
		t.Errorf("%d large buffers still lent after the copy", out)
	}
}

// TestBodyCopySmallStaysSmall: a body under largeCopyAfter never takes a
// large buffer.
func TestBodyCopySmallStaysSmall(t *testing.T) {
	src := &readSizes{left: 1024}
	got, rec, err := copyThrough(t, src, &copyBuffers{})
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, got, 1024)
	if rec.BytesOut != 1024 {
		t.Errorf("bytes_out %d, want 1024", rec.BytesOut)
	}
	for _, n := range src.sizes {
		if n != smallCopyBuffer {
			t.Fatalf("reads asked for %v, want %d each", src.sizes, smallCopyBuffer)
		}
	}
}

// TestBodyCopyLargeBuffersBounded: with every large buffer lent, a large
// body is still copied whole, with its small buffer.
func TestBodyCopyLargeBuffersBounded(t *testing.T) {
	var bufs copyBuffers
	var lent []*[largeCopyBuffer]byte
	for range maxLargeCopyBuffers {
		p := bufs.large()
		if p == nil {
			t.Fatalf("only %d large buffers lent, want %d", len(lent), maxLargeCopyBuffers)
		}
		lent = append(lent, p)
	}
	if bufs.large() != nil {
		t.Fatalf("a large buffer lent beyond the %d", maxLargeCopyBuffers)
	}
	const size = 2 * largeCopyAfter
	src := &readSizes{left: size}
	got, _, err := copyThrough(t, src, &bufs)
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, got, size)
	for _, n := range src.sizes {
		if n != smallCopyBuffer {
			t.Fatalf("reads asked for %v with no large buffer free, want %d each", src.sizes, smallCopyBuffer)
		}
	}
	bufs.putLarge(lent[0])
	if bufs.large() == nil {
		t.Fatal("a large buffer given back is not lent again")
	}
}

// TestBodyCopyFailureRecorded: a body that breaks off, before or after the
// move to the large buffer, fails the copy with its error and makes the
// line an error, as a plain read through the body does.
func TestBodyCopyFailureRecorded(t *testing.T) {
	for _, size := range []int{100, largeCopyAfter + 100} {
		src := &readSizes{left: size, fail: syscall.ECONNRESET}
		got, rec, err := copyThrough(t, src, &copyBuffers{})
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("size %d: copy error %v, want the reset", size, err)
		}
		checkPattern(t, got, size)
		if rec.BytesOut != int64(size) || rec.Verdict != VerdictError || rec.Code != CodeUpstreamError {
			t.Errorf("size %d: line %+v, want an upstream error with bytes_out %d", size, rec, size)
		}
	}
}

// failWriter takes limit bytes, then fails.
type failWriter struct{ limit int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		n := w.limit
		w.limit = 0
		return n, syscall.EPIPE
	}
	w.limit -= len(p)
	return len(p), nil
}

// TestBodyCopyWriteFailure: a client that goes away ends the copy with
// the write's error, counting only what it took, and gives the buffers
// back.
func TestBodyCopyWriteFailure(t *testing.T) {
	var bufs copyBuffers
	d := newDecision(&sink{}, "192.0.2.1:1", modeHTTP)
	lb := wrapLoggingBody(&readSizes{left: 4 * largeCopyAfter}, d, &bufs)
	n, err := io.Copy(&failWriter{limit: largeCopyAfter + 5}, lb)
	if !errors.Is(err, syscall.EPIPE) || n != largeCopyAfter+5 {
		t.Fatalf("copy: %d bytes, %v; want %d and the write's error", n, err, largeCopyAfter+5)
	}
	if out := bufs.largeOut.Load(); out != 0 {
		t.Errorf("%d large buffers still lent", out)
	}
}

// TestForwardLargeBodyScrubbed: a large plain-HTTP answer from a host
// whose entry injects a secret (allow_plaintext) is copied with the large
// buffer and still through the scrubber: every echo of the secret is
// masked wherever it falls (in the small buffer, across the move to the
// large one, across large buffers, at the end), and every byte is counted.
func TestForwardLargeBodyScrubbed(t *testing.T) {
	const size = largeCopyAfter + 3*largeCopyBuffer
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, at := range []int{10, smallCopyBuffer - 5, largeCopyAfter - 7, largeCopyAfter + largeCopyBuffer - 3, size - len(canary)} {
		copy(body[at:], canary)
	}
	plain := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	env := newMITMEnv(t, nil, func(gc *gatewayConfig) {
		gc.exempt = append(gc.exempt, plain.hostPort())
		gc.allow = append(gc.allow, "open.test")
		gc.names["open.test"] = []string{"127.0.0.1"}
		gc.entries = append(gc.entries, config.Entry{}, config.Entry{Transform: gc.entries[0].Transform, AllowPlaintext: true})
	})
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: env.gw.addr})}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://open.test:" + plain.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.ReplaceAll(body, []byte(canary), []byte("[redacted]"+strings.Repeat("*", len(canary)-len("[redacted]"))))
	if !bytes.Equal(got, want) {
		t.Fatalf("the client got %d bytes, not the %d of the scrubbed body (secret in it: %v)", len(got), len(want), bytes.Contains(got, []byte(canary)))
	}
	line := env.gw.logs.waitDecisions(t, 1)[0]
	checkLine(t, line, map[string]any{"mode": "http", "verdict": "allow", "bytes_out": float64(size)})
}
