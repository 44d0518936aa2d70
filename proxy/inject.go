package proxy

import (
	"net/http"

	"github.com/hookgate/hookgate/transform"
)

// inject applies an entry's transform to an outgoing request's header:
// hop-by-hop, Proxy-* and every client copy of a configured header are
// removed, then the configured values are set. The decision records the
// header NAMES only.
func inject(h http.Header, rules *transform.Rules, d *decision) {
	rules.Apply(h)
	d.injected = rules.Names()
	if rules.Scrubber() != nil {
		// An encoded body would hide an echoed secret from the scrubber.
		h.Set("Accept-Encoding", "identity")
	}
}

// scrubResponse replaces every injected secret that an upstream echoes, in
// the response's headers ("[redacted]") and its streamed body (a mask of the
// same length, so Content-Length stays true and the body is not re-framed).
func scrubResponse(resp *http.Response, s *transform.Scrubber) {
	if s == nil {
		return
	}
	s.Header(resp.Header)
	s.Header(resp.Trailer)
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	resp.Body = s.Reader(resp.Body)
}
