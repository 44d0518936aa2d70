package transform

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func scrubberFor(t testing.TB, secrets ...string) *Scrubber {
	t.Helper()
	s := newScrubber(secrets)
	if s == nil {
		t.Fatal("nil scrubber")
	}
	return s
}

// sampledFor is scrubberFor with find sampling pairs (findSampled) from
// the start even for secrets shorter than sampleMin, which newScrubber
// would not.
func sampledFor(t testing.TB, secrets ...string) *Scrubber {
	t.Helper()
	s := scrubberFor(t, secrets...)
	s.sample()
	s.sampleFirst = true
	if s.pairs == nil {
		t.Fatalf("%d secrets too short to sample", len(secrets))
	}
	return s
}

func TestScrubberFromRules(t *testing.T) {
	r := mustCompile(t, []HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:TOKEN}"}})
	s := r.Scrubber()
	if s != r.Scrubber() {
		t.Error("Scrubber is not built once")
	}
	h := http.Header{"X-Echo": {"you sent Bearer " + testSecretValue}, "X-Raw": {testSecretValue + testSecretValue}}
	if !s.Header(h) {
		t.Fatal("Header reported no change")
	}
	want := http.Header{"X-Echo": {"you sent [redacted]"}, "X-Raw": {"[redacted][redacted]"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %q, want %q", h, want)
	}
	if got := s.String(); got != "transform.Scrubber(2 secrets)" {
		t.Errorf("String = %q", got)
	}
}

func TestScrubHeader(t *testing.T) {
	s := scrubberFor(t, "s3cr3t", "tok")
	h := http.Header{
		"A":            {"clean", "has s3cr3t twice s3cr3t", "tok"},
		"B":            {"S3CR3T"}, // values are matched exactly
		"X-S3cr3t":     {"v"},      // names in any case: Go canonicalises them
		"x-tok-header": {"1"},
		"X-TOK-Header": {"2"},
		"X-To-K":       {"3"},
		"Clean":        {"nothing"},
	}
	if !s.Header(h) {
		t.Fatal("no change reported")
	}
	want := http.Header{
		"A":      {"clean", "has [redacted] twice [redacted]", "[redacted]"},
		"B":      {"S3CR3T"},
		"X-To-K": {"3"},
		"Clean":  {"nothing"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got  %q\nwant %q", h, want)
	}
	clean := http.Header{"A": {"b"}}
	if s.Header(clean) || !reflect.DeepEqual(clean, http.Header{"A": {"b"}}) {
		t.Error("clean header changed")
	}
	var nilS *Scrubber
	if nilS.Header(h) {
		t.Error("nil scrubber changed something")
	}
}

func TestScrubReplaceAll(t *testing.T) {
	// want is the header form; body is the same-length body form.
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
		body    string
	}{
		{"none", []string{"abc"}, "xyz", "xyz", "xyz"},
		{"one", []string{"abc"}, "xabcx", "x[redacted]x", "x***x"},
		{"adjacent", []string{"abc"}, "abcabc", "[redacted][redacted]", "******"},
		{"overlapping self", []string{"aa"}, "aaa", "[redacted]a", "**a"},
		{"longest at same start", []string{"Bearer", "Bearer tok"}, "Bearer tok!", "[redacted]!", "[redacted]!"},
		{"leftmost wins", []string{"tok", "Bearer tok"}, "Bearer tok", "[redacted]", "[redacted]"},
		{"leftmost shorter", []string{"xab", "abcdef"}, "xabcdef", "[redacted]cdef", "***cdef"},
		{"several", []string{"one", "two", "three"}, "one two three four", "[redacted] [redacted] [redacted] four", "*** *** ***** four"},
		{"long", []string{"sk-live-0123456789"}, "a sk-live-0123456789 b", "a [redacted] b", "a [redacted]******** b"},
		{"empty input", []string{"a"}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := scrubberFor(t, tt.secrets...)
			got, _ := s.replaceAll([]byte(tt.in))
			if string(got) != tt.want {
				t.Errorf("replaceAll = %q, want %q", got, tt.want)
			}
			for name, r := range readerVariants(s, tt.in) {
				out, err := io.ReadAll(r)
				if err != nil || string(out) != tt.body {
					t.Errorf("%s: got %q, %v; want %q", name, out, err, tt.body)
				}
			}
		})
	}
}

// readerVariants scrubs in through readers that split it in different ways.
func readerVariants(s *Scrubber, in string) map[string]io.Reader {
	src := func() io.ReadCloser { return io.NopCloser(strings.NewReader(in)) }
	rc := func(r io.Reader) io.ReadCloser { return io.NopCloser(r) }
	return map[string]io.Reader{
		"whole":           s.Reader(src()),
		"one byte source": s.Reader(rc(iotest.OneByteReader(strings.NewReader(in)))),
		"half source":     s.Reader(rc(iotest.HalfReader(strings.NewReader(in)))),
		"data+EOF source": s.Reader(rc(iotest.DataErrReader(strings.NewReader(in)))),
		"one byte reads":  iotest.OneByteReader(s.Reader(src())),
		"half reads":      iotest.HalfReader(s.Reader(rc(iotest.HalfReader(strings.NewReader(in))))),
		"both one byte":   iotest.OneByteReader(s.Reader(rc(iotest.OneByteReader(strings.NewReader(in))))),
	}
}

// TestScrubReaderStraddle puts secrets across every possible read boundary
// in a body larger than the work buffers.
func TestScrubReaderStraddle(t *testing.T) {
	for _, short := range []string{"xyz", "xyzw"} { // bytes.Index and Horspool paths
		t.Run(short, func(t *testing.T) { testStraddle(t, short) })
	}
}

func testStraddle(t *testing.T, short string) {
	secret := "sk-live-0123456789abcdef"
	other := "Bearer " + secret
	s := scrubberFor(t, secret, other, short)
	rng := rand.New(rand.NewPCG(1, 2))
	var in, want strings.Builder
	for in.Len() < 3*scrubBufSize {
		n := rng.IntN(5000)
		filler := strings.Repeat("ab", n/2)
		in.WriteString(filler)
		want.WriteString(filler)
		echoed := []string{secret, other, short}[rng.IntN(3)]
		in.WriteString(echoed)
		want.Write(s.maskFor(len(echoed)))
	}
	for name, r := range readerVariants(s, in.String()) {
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(out) != want.String() {
			t.Errorf("%s: output differs (len %d, want %d)", name, len(out), want.Len())
		}
	}
	for _, size := range []int{1, 2, 7, 23, 24, 25, 47, 48, 64, 511, 512, 4096, 40000} {
		r := s.Reader(io.NopCloser(strings.NewReader(in.String())))
		var out bytes.Buffer
		if _, err := io.CopyBuffer(&out, struct{ io.Reader }{r}, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		if out.String() != want.String() {
			t.Errorf("buffer %d: output differs", size)
		}
	}
	// The standard reader conformance tests.
	if err := iotest.TestReader(s.Reader(io.NopCloser(strings.NewReader(in.String()))), []byte(want.String())); err != nil {
		t.Error(err)
	}
}

// errAfter returns data, then err forever.
type errAfter struct {
	data []byte
	err  error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func (e *errAfter) Close() error { return nil }

// TestScrubReaderErrorHoldsTail: when the body fails, the bytes that may
// start a secret are not released; those before them are.
func TestScrubReaderErrorHoldsTail(t *testing.T) {
	s := scrubberFor(t, "0123456789")
	boom := errors.New("connection reset")
	r := s.Reader(&errAfter{data: []byte("hello 01234567"), err: boom})
	out, err := io.ReadAll(r)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if string(out) != "hello " {
		t.Errorf("released %q before the error, want %q", out, "hello ")
	}
	// An error is reported once; the next Read tries the source again.
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, boom) {
		t.Errorf("second Read err = %v", err)
	}
}

// errStalled stands for an upstream with nothing more to send for now.
var errStalled = errors.New("stalled")

// stallReader hands out its chunks one per Read, and reports errStalled
// once after each: what a Read of a live stream returns when the upstream
// pauses. It ends with io.EOF.
type stallReader struct {
	chunks  [][]byte
	stalled bool
}

func (r *stallReader) Read(p []byte) (int, error) {
	if !r.stalled {
		r.stalled = true
		return 0, errStalled
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	if r.chunks[0] = r.chunks[0][n:]; len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
		r.stalled = false
	}
	return n, nil
}

func (r *stallReader) Close() error { return nil }

// readUntilStall reads r until the source stalls or ends.
func readUntilStall(t *testing.T, r io.Reader, buf []byte) (string, bool) {
	t.Helper()
	var out []byte
	for range 10000 {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		switch {
		case errors.Is(err, errStalled):
			return string(out), false
		case err == io.EOF:
			return string(out), true
		case err != nil:
			t.Fatal(err)
		}
	}
	t.Fatal("no stall after 10000 reads")
	return "", false
}

// TestScrubReaderReleasesBeforeStall: when the upstream pauses, everything
// that cannot start a secret has been handed out; only a tail that is a
// proper prefix of a secret waits, and a secret split across the pause is
// still masked.
func TestScrubReaderReleasesBeforeStall(t *testing.T) {
	secret := "Bearer sk-live-0123456789"
	tests := []struct {
		name   string
		chunks []string
		want   []string // released by each stall, then at EOF
	}{
		{"events", []string{"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"},
			[]string{"", "data: 1\n\n", "data: 2\n\n", "data: 3\n\n", ""}},
		{"short event", []string{"x", "y"}, []string{"", "x", "y", ""}},
		{"prefix held", []string{"data: Bear", "ly\n\n"}, []string{"", "data: ", "Bearly\n\n", ""}},
		{"secret split", []string{"a Bearer sk-", "live-0123456789 b\n\n"},
			[]string{"", "a ", "[redacted]*************** b\n\n", ""}},
		{"prefix at EOF", []string{"end Bearer sk"}, []string{"", "end ", "Bearer sk"}},
		{"overlapping prefix", []string{"BeBearer", " sk-live-0123456789"},
			[]string{"", "Be", "[redacted]***************", ""}},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 7, 4096} {
			t.Run(fmt.Sprintf("%s/buf%d", tt.name, size), func(t *testing.T) {
				src := &stallReader{}
				for _, c := range tt.chunks {
					src.chunks = append(src.chunks, []byte(c))
				}
				r := scrubberFor(t, secret, "sk-live-0123456789").Reader(src)
				buf := make([]byte, size)
				for i, want := range tt.want {
					got, eof := readUntilStall(t, r, buf)
					if got != want || eof != (i == len(tt.want)-1) {
						t.Fatalf("step %d: released %q (eof %v), want %q", i, got, eof, want)
					}
				}
			})
		}
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestScrubReaderClose(t *testing.T) {
	src := &closeRecorder{Reader: strings.NewReader("x")}
	r := scrubberFor(t, "abc").Reader(src)
	if err := r.Close(); err != nil || !src.closed {
		t.Fatal("Close not passed on")
	}
	var nilS *Scrubber
	if got := nilS.Reader(src); got != io.ReadCloser(src) {
		t.Error("nil scrubber wraps")
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }
func (zeroReader) Close() error             { return nil }

func TestScrubReaderNoProgress(t *testing.T) {
	if _, err := scrubberFor(t, "abc").Reader(zeroReader{}).Read(make([]byte, 8)); err != io.ErrNoProgress {
		t.Fatalf("err = %v", err)
	}
}

// FuzzScrubReader checks that streaming gives the same output as scrubbing
// the whole input at once, whatever the read sizes, and that no secret
// survives.
func FuzzScrubReader(f *testing.F) {
	f.Add([]byte("xx secret yy secretsecret"), uint8(3), uint8(1))
	f.Add([]byte("sesesecret"), uint8(1), uint8(7))
	f.Add([]byte("abcabcab"), uint8(2), uint8(2))
	f.Add([]byte("data: se\n\ndata: secret\n\n"), uint8(4), uint8(0))
	f.Add([]byte("sesesesecretabcabcab"), uint8(0), uint8(200))
	f.Add([]byte("Bearer secret secret Bearer Bearer secretsesecret ababab x:sec:y bcabcab"), uint8(5), uint8(9))
	f.Add([]byte("sesesesesesesesesecret Bearer sesesesesesesesecretBearer sesesesesesesesecre"), uint8(7), uint8(30))
	f.Fuzz(func(t *testing.T, in []byte, srcChunk, dstChunk uint8) {
		// No secret contains '[' or '*', nor a tail of "[redacted]"
		// followed by more: masks cannot make new occurrences.
		for _, s := range []*Scrubber{
			scrubberFor(t, "secret", "cret", "sesec", "abcab", "bcabc", "ecab"), // Horspool
			scrubberFor(t, "secret", "cret", "sesec", "abcab"),                  // anchored, several
			scrubberFor(t, "secret", "ab"),                                      // anchored, several
			scrubberFor(t, "sesec"),                                             // anchored, one
			scrubberFor(t, "se"),                                                // anchored, one
			// Secrets that hold others: found around those.
			scrubberFor(t, "Bearer secret", "secret"),        // a bearer transform
			scrubberFor(t, "sesecret", "secret", "sec"),      // two hold one, at 2 and 0
			scrubberFor(t, "abab", "aba", "ba"),              // overlapping, periodic
			scrubberFor(t, "x:sec:y", "sec", "cab", "bcabc"), // several bare
			// Sampled pairs (findSampled), at strides of 1 to 19.
			sampledFor(t, "secret", "cret", "sesec", "abcab", "bcabc", "ecab"),
			sampledFor(t, "Bearer secret", "secret"),
			sampledFor(t, "sesecret", "secret", "sec"),
			sampledFor(t, "abab", "aba", "ba"),
			scrubberFor(t, "sesesesesesesesecret", "Bearer sesesesesesesesecret"),
		} {
			fuzzScrub(t, s, in, srcChunk, dstChunk)
		}
	})
}

// naiveReplace is the reference: at each byte, the longest secret that
// starts there (replaced by repl of its length), else the byte.
func naiveReplace(s *Scrubber, in []byte, repl func(n int) []byte) []byte {
	var out []byte
	for i := 0; i < len(in); {
		l := 0
		for _, sec := range s.secrets {
			if bytes.HasPrefix(in[i:], sec) && len(sec) > l {
				l = len(sec)
			}
		}
		if l == 0 {
			out = append(out, in[i])
			i++
			continue
		}
		out = append(out, repl(l)...)
		i += l
	}
	return out
}

func fuzzScrub(t *testing.T, s *Scrubber, in []byte, srcChunk, dstChunk uint8) {
	header, _ := s.replaceAll(in)
	if naive := naiveReplace(s, in, func(int) []byte { return []byte(redacted) }); !bytes.Equal(header, naive) {
		t.Fatalf("replaceAll %q != naive %q", header, naive)
	}
	// Bodies get same-length masks.
	want := naiveReplace(s, in, s.maskFor)
	if len(want) != len(in) {
		t.Fatalf("masked body has %d bytes, the input %d", len(want), len(in))
	}
	for _, sec := range s.secrets {
		if bytes.Contains(want, sec) {
			t.Fatalf("a secret survives in %q", want)
		}
	}
	// The source stalls after every chunk: by then everything but the
	// longest tail that is a proper prefix of a secret must be out, and
	// what is out is final.
	src := &stallReader{}
	for rest := in; len(rest) > 0; {
		n := min(len(rest), int(srcChunk%64)+1)
		src.chunks = append(src.chunks, rest[:n])
		rest = rest[n:]
	}
	r := s.Reader(src)
	buf := make([]byte, int(dstChunk)+1)
	var out []byte
	for step := 0; ; step++ {
		consumed := min(len(in), step*(int(srcChunk%64)+1))
		got, eof := readUntilStall(t, r, buf)
		out = append(out, got...)
		if !bytes.HasPrefix(want, out) {
			t.Fatalf("stream %q is not a prefix of the whole %q", out, want)
		}
		if eof {
			break
		}
		if held := consumed - len(out); held > naiveHeld(s, in[:consumed]) {
			t.Fatalf("after %q: %d bytes held back, at most %d may start a secret", in[:consumed], held, naiveHeld(s, in[:consumed]))
		}
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("stream %q != whole %q", out, want)
	}
}

// naiveHeld is the length of the longest tail of b that is a proper prefix
// of some secret.
func naiveHeld(s *Scrubber, b []byte) int {
	for j := range b {
		for _, sec := range s.secrets {
			if len(sec) > len(b)-j && bytes.HasPrefix(sec, b[j:]) {
				return len(b) - j
			}
		}
	}
	return 0
}

// benchBody is 64 MiB of random-ish printable data.
var benchBody = func() []byte {
	b := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_ {}\":,\n"
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return b
}()

// onlyReader and onlyWriter hide WriteTo/ReadFrom so both sides of the
// comparison copy through the same 32 KiB buffer, as a proxy does.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// binaryBody is 64 MiB in which every byte value is as frequent, the
// pattern bench/ downloads: an anchor byte occurs every 256 bytes.
var binaryBody = func() []byte {
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}()

func benchCopy(b *testing.B, body []byte, wrap func(io.ReadCloser) io.ReadCloser) {
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := wrap(io.NopCloser(onlyReader{bytes.NewReader(body)}))
		if _, err := io.CopyBuffer(onlyWriter{io.Discard}, onlyReader{r}, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScrubReader(b *testing.B) {
	one := newScrubber([]string{"sk-live-0123456789abcdef"})
	three := newScrubber([]string{"sk-live-0123456789abcdef", "Bearer sk-live-0123456789abcdef", "u-7f3a9c"})
	// What `Authorization: "Bearer ${env:TOKEN}"` makes: the token and the
	// whole value, as bench/ has it (a 48-digit hex token).
	bearer := newScrubber([]string{"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c", "Bearer 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c"})
	b.Run("plain", func(b *testing.B) { benchCopy(b, benchBody, func(r io.ReadCloser) io.ReadCloser { return r }) })
	b.Run("scrub-1-secret", func(b *testing.B) { benchCopy(b, benchBody, one.Reader) })
	b.Run("scrub-3-secrets", func(b *testing.B) { benchCopy(b, benchBody, three.Reader) })
	b.Run("binary-scrub-1-secret", func(b *testing.B) { benchCopy(b, binaryBody, one.Reader) })
	b.Run("binary-scrub-3-secrets", func(b *testing.B) { benchCopy(b, binaryBody, three.Reader) })
	b.Run("binary-scrub-bearer", func(b *testing.B) { benchCopy(b, binaryBody, bearer.Reader) })
}

// TestScrubReaderAllocs: a body that ends in nothing that may start a
// secret costs the reader itself and nothing more (the held-back tail's
// buffer comes only when a tail is held).
func TestScrubReaderAllocs(t *testing.T) {
	s := scrubberFor(t, "sk-live-0123456789abcdef", "u-7f3a9c")
	body := bytes.Repeat([]byte("xyz "), 256)
	src := bytes.NewReader(body)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(body)
		r := s.Reader(io.NopCloser(src))
		for {
			if _, err := r.Read(buf); err != nil {
				break
			}
		}
	})
	// The reader, the finder's cache of two secrets, io.NopCloser's wrapper.
	if allocs > 3 {
		t.Errorf("%v allocations per body, want at most 3", allocs)
	}
}

// TestScrubFindEveryPlace: a secret is found at every place in a buffer,
// from every starting point before it, by every strategy: in particular
// where it ends the buffer and where a sample falls on its last pair.
func TestScrubFindEveryPlace(t *testing.T) {
	for _, s := range []*Scrubber{
		scrubberFor(t, "secret"),
		scrubberFor(t, "secret", "Bearer secret"),
		scrubberFor(t, "secret", "cret", "sesec", "abcab", "bcabc", "ecab"),
		sampledFor(t, "secret"),
		sampledFor(t, "secret", "Bearer secret"),
		sampledFor(t, "se"),
		scrubberFor(t, "sesesesesesesesecret", "Bearer sesesesesesesesecret"),
	} {
		for _, sec := range s.strs {
			for size := len(sec); size < len(sec)+50; size++ {
				for at := 0; at+len(sec) <= size; at++ {
					b := bytes.Repeat([]byte{'x'}, size)
					copy(b[at:], sec)
					for from := 0; from <= at; from++ {
						f := s.newFinder()
						i, l := s.find(b, from, &f)
						if wi, wl := naiveFind(s, b, from); i != wi || l != wl {
							t.Fatalf("%d secrets, %q from %d: found (%d, %d), want (%d, %d)", len(s.strs), b, from, i, l, wi, wl)
						}
					}
				}
			}
		}
	}
}

// naiveFind is find's reference: the first place at or after from where a
// secret starts, and the longest one there.
func naiveFind(s *Scrubber, b []byte, from int) (int, int) {
	for i := from; i < len(b); i++ {
		for _, sec := range s.secrets { // longest first
			if bytes.HasPrefix(b[i:], sec) {
				return i, len(sec)
			}
		}
	}
	return -1, 0
}

// TestScrubDenseSamples: where the secrets' pairs are common, sampling
// gives way to Horspool in the middle of a buffer, and what is found is
// the same.
func TestScrubDenseSamples(t *testing.T) {
	for _, s := range []*Scrubber{
		sampledFor(t, "secret"),
		sampledFor(t, "secret", "Bearer secret", "sesec"),
		scrubberFor(t, "secretsecretsecretsecret"),
	} {
		in := []byte(strings.Repeat("se", 700) + "secretsecretsecretsecret" + strings.Repeat("secre", 100) + "sesecret" + strings.Repeat("c", 50))
		want := len(in)
		for _, sec := range s.strs {
			if i := strings.Index(string(in), sec); i >= 0 {
				want = min(want, i)
			}
		}
		f := s.newFinder()
		if i, _ := s.find(in, 0, &f); i != want || !f.dense {
			t.Errorf("%d secrets: found at %d (want %d), dense=%v (want true)", len(s.strs), i, want, f.dense)
		}
		for _, chunks := range [][2]uint8{{255, 255}, {63, 200}, {6, 3}} {
			fuzzScrub(t, s, in, chunks[0], chunks[1])
		}
	}
}

// TestScrubDenseAnchors: where a secret's anchor byte is common, find gives
// way to sampling in the middle of a buffer, and what is found is the same.
func TestScrubDenseAnchors(t *testing.T) {
	for _, secrets := range [][]string{{"secret"}, {"secret", "cret", "sesec", "abcab"}} {
		s := scrubberFor(t, secrets...)
		in := []byte(strings.Repeat("c", 300) + "secret" + strings.Repeat("xcre", 100) + "sesecret abcab" + strings.Repeat("c", 50))
		f := s.newFinder()
		if i, _ := s.find(in, 0, &f); i != 300 || !f.sampling {
			t.Errorf("%q: found at %d (want 300), sampling=%v (want true)", secrets, i, f.sampling)
		}
		for _, chunks := range [][2]uint8{{255, 255}, {63, 200}, {6, 3}} {
			fuzzScrub(t, s, in, chunks[0], chunks[1])
		}
	}
}
