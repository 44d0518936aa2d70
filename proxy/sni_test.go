package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// recordingConn is a client's side of a connection that keeps what the
// client writes and ends the handshake at its first read.
type recordingConn struct {
	net.Conn // nil: only the methods below are called
	written  bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error)      { return c.written.Write(p) }
func (c *recordingConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *recordingConn) Close() error                     { return nil }
func (c *recordingConn) SetDeadline(time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

// clientHelloOf returns the ClientHello record(s) crypto/tls sends with cfg.
func clientHelloOf(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &recordingConn{}
	_ = tls.Client(c, cfg).Handshake()
	if c.written.Len() == 0 {
		t.Fatal("the client wrote no ClientHello")
	}
	return c.written.Bytes()
}

// realHellos are ClientHellos of crypto/tls clients: with and without a
// server name, ALPN, TLS 1.2 only.
func realHellos(t testing.TB) map[string][]byte {
	return map[string][]byte{
		"sni":        clientHelloOf(t, &tls.Config{ServerName: "example.com"}),
		"no-sni":     clientHelloOf(t, &tls.Config{ServerName: "127.0.0.1"}), // an IP literal: no SNI sent
		"alpn":       clientHelloOf(t, &tls.Config{ServerName: "api.example.com", NextProtos: []string{"h2", "http/1.1"}}),
		"tls12-only": clientHelloOf(t, &tls.Config{ServerName: "example.org", MaxVersion: tls.VersionTLS12}),
	}
}

// refragment re-frames the handshake bytes of the records in hello into
// records of at most size bytes each.
func refragment(t testing.TB, hello []byte, size int) []byte {
	t.Helper()
	var payload []byte
	for rest := hello; len(rest) > 0; {
		n := int(rest[3])<<8 | int(rest[4])
		payload = append(payload, rest[5:5+n]...)
		rest = rest[5+n:]
	}
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, 0x16, 0x03, 0x01, byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

// referencePeek reads a ClientHello with a crypto/tls server handshake
// stopped at GetConfigForClient: the parser peekClientHello must agree with.
func referencePeek(data []byte) (string, bool) {
	errStop := errors.New("stop")
	var name string
	seen := false
	conn := &readOnlyTestConn{r: bytes.NewReader(data)}
	_ = tls.Server(conn, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, seen = h.ServerName, true
			return nil, errStop
		},
	}).Handshake()
	return name, seen
}

// readOnlyTestConn feeds crypto/tls in referencePeek; writes are dropped.
type readOnlyTestConn struct {
	net.Conn // nil: only the methods below are called
	r        io.Reader
}

func (c *readOnlyTestConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *readOnlyTestConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *readOnlyTestConn) Close() error                     { return nil }
func (c *readOnlyTestConn) SetDeadline(time.Time) error      { return nil }
func (c *readOnlyTestConn) SetReadDeadline(time.Time) error  { return nil }
func (c *readOnlyTestConn) SetWriteDeadline(time.Time) error { return nil }

// oneByteReader hands out its bytes one per read, as a slow client would.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestPeekClientHelloReadsRealHellos(t *testing.T) {
	for name, hello := range realHellos(t) {
		want, ok := referencePeek(hello)
		if !ok {
			t.Fatalf("%s: crypto/tls refuses its own hello", name)
		}
		for _, size := range []int{0, 1, 7, 100} {
			data := hello
			if size > 0 {
				data = refragment(t, hello, size)
			}
			// Whatever follows the hello is read with it and replayed.
			input := append(append([]byte(nil), data...), "next flight"...)
			for _, r := range []io.Reader{bytes.NewReader(input), oneByteReader{bytes.NewReader(input)}} {
				got, consumed, err := peekClientHello(r)
				if err != nil {
					t.Fatalf("%s/%d: %v", name, size, err)
				}
				if got.ServerName != want {
					t.Errorf("%s/%d: server name %q, crypto/tls reads %q", name, size, got.ServerName, want)
				}
				if !bytes.HasPrefix(input, consumed) || len(consumed) < len(data) {
					t.Errorf("%s/%d: consumed %d bytes, not a prefix of the input covering the hello (%d)", name, size, len(consumed), len(data))
				}
			}
		}
	}
}

// withExtensions rebuilds a ClientHello record from hello with the
// extensions block replaced by exts.
func withExtensions(t testing.TB, hello []byte, exts []byte) []byte {
	t.Helper()
	body := hello[5+4:] // record and handshake headers
	s := cryptobyte.String(body)
	var sessionID, suites, compression cryptobyte.String
	if !s.Skip(2+32) || !s.ReadUint8LengthPrefixed(&sessionID) || !s.ReadUint16LengthPrefixed(&suites) ||
		!s.ReadUint8LengthPrefixed(&compression) {
		t.Fatal("cannot frame the hello")
	}
	fixed := body[:len(body)-len(s)]
	msgBody := append(append([]byte(nil), fixed...), byte(len(exts)>>8), byte(len(exts)))
	msgBody = append(msgBody, exts...)
	msg := append([]byte{typeClientHello, byte(len(msgBody) >> 16), byte(len(msgBody) >> 8), byte(len(msgBody))}, msgBody...)
	return append([]byte{0x16, 0x03, 0x01, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// sniExtension is a server_name extension with the given (type, name)
// entries.
func sniExtension(names ...any) []byte {
	var list []byte
	for i := 0; i < len(names); i += 2 {
		n := names[i+1].(string)
		list = append(list, byte(names[i].(int)), byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	data := append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
	return append([]byte{0, 0, byte(len(data) >> 8), byte(len(data))}, data...)
}

func TestPeekClientHelloRefusesWhatCryptoTLSRefuses(t *testing.T) {
	base := realHellos(t)["sni"]
	alpn := []byte{0x00, 0x10, 0x00, 0x05, 0x00, 0x03, 0x02, 'h', '2'}
	cases := map[string]struct {
		data []byte
		want error
	}{
		"two server_name extensions": {withExtensions(t, base, append(sniExtension(0, "a.example"), sniExtension(0, "b.example")...)), errBadHello},
		"two host names":             {withExtensions(t, base, sniExtension(0, "a.example", 0, "b.example")), errBadHello},
		"a name ending in a dot":     {withExtensions(t, base, sniExtension(0, "example.com.")), errBadHello},
		"an empty name":              {withExtensions(t, base, sniExtension(0, "")), errBadHello},
		"any extension twice":        {withExtensions(t, base, append(append(sniExtension(0, "a.example"), alpn...), alpn...)), errBadHello},
		"bytes behind the extensions": {func() []byte {
			h := withExtensions(t, base, sniExtension(0, "a.example"))
			h = append(h, 0)
			h[4]++ // record length
			h[8]++ // handshake length
			return h
		}(), errBadHello},
		"not a handshake record": {append([]byte{0x17}, base[1:]...), errNotTLS},
		"plain HTTP":             {[]byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), errNotTLS},
		"an empty record":        {append([]byte{0x16, 0x03, 0x01, 0, 0}, base...), errBadHello},
		"not a ClientHello":      {append([]byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x02}, 0, 0, 0), errBadHello},
		"cut short":              {base[:len(base)-10], io.ErrUnexpectedEOF},
		"nothing":                {nil, io.EOF},
	}
	for name, c := range cases {
		_, consumed, err := peekClientHello(bytes.NewReader(c.data))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
		if !bytes.HasPrefix(c.data, consumed) {
			t.Errorf("%s: the consumed bytes are not what was read", name)
		}
		if sni, ok := referencePeek(c.data); ok && c.want != errNotTLS {
			t.Errorf("%s: crypto/tls reads it (server name %q), the test case is wrong", name, sni)
		}
	}
	// Other name types are skipped, as crypto/tls skips them.
	h := withExtensions(t, base, sniExtension(1, "opaque", 0, "a.example"))
	got, _, err := peekClientHello(bytes.NewReader(h))
	if want, _ := referencePeek(h); err != nil || got.ServerName != want || want != "a.example" {
		t.Errorf("name types: got %v, %v; crypto/tls reads %q", got, err, want)
	}
}

// FuzzPeekClientHello: whatever crypto/tls reads as a ClientHello, the
// peek reads with the same server name. (The peek may read hellos whose
// other extensions crypto/tls would refuse: the upstream judges those.)
func FuzzPeekClientHello(f *testing.F) {
	for _, h := range realHellos(f) {
		f.Add(h)
		f.Add(refragment(f, h, 50))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, consumed, err := peekClientHello(bytes.NewReader(data))
		if !bytes.HasPrefix(data, consumed) {
			t.Fatal("the consumed bytes are not what was read")
		}
		want, ok := referencePeek(data)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("crypto/tls reads server name %q, the peek fails: %v", want, err)
		}
		if got.ServerName != want {
			t.Fatalf("server name %q, crypto/tls reads %q", got.ServerName, want)
		}
	})
}

// BenchmarkPeekClientHello measures the peek of a usual ClientHello.
func BenchmarkPeekClientHello(b *testing.B) {
	hello := clientHelloOf(b, &tls.Config{ServerName: "api.example.com", NextProtos: []string{"h2", "http/1.1"}})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := peekClientHello(bytes.NewReader(hello)); err != nil {
			b.Fatal(err)
		}
	}
}
