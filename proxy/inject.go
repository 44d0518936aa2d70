package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"

	"github.com/hookgate/hookgate/transform"
)

// inject applies an entry's transform to an outgoing request's header:
// hop-by-hop, Proxy-* and every client copy of a configured header are
// removed, then the configured values are set. The decision records the
// header NAMES only.
func inject(h http.Header, rules *transform.Rules, d *decision) {
	rules.Apply(h)
	d.injected = rules.Names()
	for _, q := range rules.QueryNames() {
		// Query parameters are recorded by name, as headers are.
		d.injected = append(d.injected, "query:"+q)
	}
	if rules.Scrubber() != nil {
		// An encoded body would hide an echoed secret from the scrubber.
		h.Set("Accept-Encoding", "identity")
	}
}

// scrubResponse replaces every injected secret that an upstream echoes, in
// every byte the response carries to the sandbox: its headers ("[redacted]";
// a header named after a secret is dropped; the reason phrase too), its trailers (their values
// arrive after the body, so they are scrubbed again when the body ends),
// and its streamed body (a mask of the same length, so Content-Length stays
// true and the body is not re-framed). After a 101 the body is the switched
// connection: what the upstream sends on it is scrubbed the same way (frame
// lengths stay true), what the client sends goes through untouched.
// Informational (1xx) answers are scrubbed by scrubInformational.
func scrubResponse(resp *http.Response, s *transform.Scrubber) {
	if s == nil {
		return
	}
	// The reason phrase reaches the client after a 101 (ReverseProxy
	// writes the upstream's status line as it is).
	resp.Status = s.Replace(resp.Status)
	s.Header(resp.Header)
	s.Header(resp.Trailer) // the announced names
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &scrubbedConn{ReadCloser: s.Reader(rw), w: rw}
		return
	}
	resp.Body = &scrubbedBody{ReadCloser: s.Reader(resp.Body), s: s, resp: resp}
}

// scrubbedBody is a scrubbed response body that also scrubs the response's
// trailers once the body has ended: net/http fills in their values when it
// reads the end of the body, before the caller copies them.
type scrubbedBody struct {
	io.ReadCloser
	s    *transform.Scrubber
	resp *http.Response
}

func (b *scrubbedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.s.Header(b.resp.Trailer)
	}
	return n, err
}

func (b *scrubbedBody) Close() error {
	err := b.ReadCloser.Close()
	b.s.Header(b.resp.Trailer)
	return err
}

// scrubbedConn is the body of a 101 Switching Protocols response: reads
// come scrubbed from the upstream, writes go to it as they are.
type scrubbedConn struct {
	io.ReadCloser
	w io.Writer
}

func (c *scrubbedConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// scrubInformational returns ctx with a trace hook that scrubs the header of
// every informational (1xx) answer — 100 Continue, 103 Early Hints — in
// place, before the hooks already in ctx (httputil.ReverseProxy's, which
// pass them to the client) see it: hooks added last run first.
func scrubInformational(ctx context.Context, s *transform.Scrubber) context.Context {
	if s == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			s.Header(http.Header(h))
			return nil
		},
	})
}
