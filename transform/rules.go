package transform

import (
	"fmt"
	"net/http"
	"strings"
)

// header is one compiled header: canonical name and resolved value.
type header struct {
	name  string
	value Secret
}

// Rules is the compiled, immutable transform of one allowlist entry. A nil
// *Rules is valid and has no headers (Apply still strips). Printing a Rules
// shows header names only.
type Rules struct {
	headers  []header // sorted by name
	names    []string
	refs     map[string]string // canonical name → value as written
	secrets  []Secret
	envNames []string // sorted, distinct
	scrubber *Scrubber

	basic bool    // Authorization is Basic credentials (BasicSpec)
	query []param // sorted by name
	// oauth2, if set, is a client-credentials grant whose token the proxy
	// fetches and sets as Authorization: Bearer.
	oauth2 *OAuth2
	// sigv4, if set, signs each request (Authorization, X-Amz-*).
	sigv4 *AWSSigV4
}

// Names returns the canonical names of the configured headers, sorted: what
// the decision log line records. The caller may modify the slice.
func (r *Rules) Names() []string {
	if r == nil || len(r.names) == 0 {
		return nil
	}
	return append([]string(nil), r.names...)
}

// References returns header → value as written, with references unresolved
// ("Bearer ${env:X}"), for the admin API. Values without references are
// literal configuration and are shown as written.
func (r *Rules) References() map[string]string {
	m := make(map[string]string, len(r.refsOrNil()))
	for k, v := range r.refsOrNil() {
		m[k] = v
	}
	return m
}

func (r *Rules) refsOrNil() map[string]string {
	if r == nil {
		return nil
	}
	return r.refs
}

// Secrets returns every resolved secret, distinct: each resolved reference,
// and each whole header value that contains one. Literal-only values are not
// secrets.
func (r *Rules) Secrets() []Secret {
	if r == nil || len(r.secrets) == 0 {
		return nil
	}
	return append([]Secret(nil), r.secrets...)
}

// EnvNames returns the names of the environment variables r's secrets come
// from (each ${env:NAME} reference; "$${env:NAME}" is literal text, not a
// reference), sorted and distinct: what must not reach a process that may
// not see the secrets. The caller may modify the slice.
func (r *Rules) EnvNames() []string {
	if r == nil || len(r.envNames) == 0 {
		return nil
	}
	return append([]string(nil), r.envNames...)
}

// Scrubber returns the scrubber for r's secrets, built once by Compile; nil
// (which is valid and changes nothing) when there are none.
func (r *Rules) Scrubber() *Scrubber {
	if r == nil {
		return nil
	}
	return r.scrubber
}

// String lists the header names, never values.
func (r *Rules) String() string {
	if r == nil {
		return "transform.Rules(nil)"
	}
	if len(r.query) > 0 {
		return "transform.Rules" + fmt.Sprint(r.names) + "?" + fmt.Sprint(r.QueryNames())
	}
	return "transform.Rules" + fmt.Sprint(r.names)
}

// Format prints String for every verb, so that %+v and %#v cannot reach the
// resolved values.
func (r *Rules) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// Apply prepares the header of an outgoing request: it strips, then sets.
//
// Stripped: the hop-by-hop headers (Connection, Keep-Alive, TE, Trailer,
// Transfer-Encoding, Upgrade), every header named in Connection, every
// Proxy-* header, and every client copy of a configured header. A client
// copy is any name equal to the configured one under ASCII case and with '_'
// and '-' taken as the same byte (SameHeaderName): CGI, WSGI and Rack
// backends map both X-Api-Key and X_api_key to HTTP_X_API_KEY, so a copy
// spelt with underscores would sit next to the injected value and may win.
// Matching runs over the map's keys, so non-canonical keys are caught too.
// Then each configured header is set to its single resolved value.
//
// As httputil.ReverseProxy does, "TE: trailers" is kept when the client sent
// it (gRPC needs it). A caller that proxies protocol upgrades (WebSocket) must
// re-add Connection and Upgrade itself after Apply.
func (r *Rules) Apply(h http.Header) {
	var connBuf [2][]string
	conn := connBuf[:0]
	teTrailers := false
	for k, v := range h {
		switch {
		case strings.EqualFold(k, "Connection"):
			conn = append(conn, v)
		case strings.EqualFold(k, "Te"):
			teTrailers = teTrailers || hasToken(v, "trailers")
		}
	}
	for k := range h {
		if r.strip(k, conn) {
			delete(h, k)
		}
	}
	if teTrailers {
		h["Te"] = []string{"trailers"}
	}
	if r == nil {
		return
	}
	for _, hd := range r.headers {
		h[hd.name] = []string{hd.value.Reveal()}
	}
}

// StripHopByHop removes what Apply removes for a request to a host without a
// transform: the hop-by-hop headers, those named in Connection, and every
// Proxy-* header ("TE: trailers" stays).
func StripHopByHop(h http.Header) { (*Rules)(nil).Apply(h) }

// strip reports whether Apply removes the header key k.
func (r *Rules) strip(k string, conn [][]string) bool {
	if isHopByHop(k) || hasPrefixFold(k, "Proxy-") {
		return true
	}
	for _, v := range conn {
		if hasToken(v, k) {
			return true
		}
	}
	if r != nil {
		if (r.oauth2 != nil || r.sigv4 != nil) && SameHeaderName(k, "Authorization") {
			return true // the proxy sets it (the fetched token, the signature)
		}
		if r.sigv4 != nil && IsSigV4Part(k) {
			return true // the sandbox's signature parts; the proxy signs anew
		}
		for _, hd := range r.headers {
			if SameHeaderName(k, hd.name) {
				return true
			}
		}
	}
	return false
}

// SameHeaderName reports whether two header names reach a backend as the
// same variable: equal under ASCII case folding, with '_' and '-' equal.
// (CGI/1.1 §4.1.18 turns "-" into "_" and upper-cases; servers that follow
// it merge or overwrite such pairs.)
func SameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldHeaderByte(a[i]) != foldHeaderByte(b[i]) {
			return false
		}
	}
	return true
}

// foldHeaderByte maps the bytes SameHeaderName treats as equal to one.
func foldHeaderByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + ('a' - 'A')
	case c == '_':
		return '-'
	}
	return c
}

// isHopByHop reports whether name is a hop-by-hop header of RFC 7230 §6.1
// (plus Keep-Alive and the Proxy-* ones, checked apart by prefix).
func isHopByHop(name string) bool {
	switch len(name) {
	case 2:
		return strings.EqualFold(name, "Te")
	case 7:
		return strings.EqualFold(name, "Trailer") || strings.EqualFold(name, "Upgrade")
	case 10:
		return strings.EqualFold(name, "Connection") || strings.EqualFold(name, "Keep-Alive")
	case 17:
		return strings.EqualFold(name, "Transfer-Encoding")
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// hasToken reports whether any of the comma-separated values holds token
// (case-insensitively), without allocating.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.Trim(t, " \t"), token) {
				return true
			}
		}
	}
	return false
}
