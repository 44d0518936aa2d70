package proxy

import (
	"net/http"
	"sync"
	"time"
)

// transportSet hands out the http.Transport of the forwarding path for a
// request's timeouts. http.Transport fixes its TLS handshake and response
// header timeouts for every request it carries, so requests whose policy or
// entry sets other ones get a clone with those. Clones live until the next
// reset (a new policy, or Shutdown), so there are never more than the
// distinct timeouts of the policies in use since then.
type transportSet struct {
	base *http.Transport // the server's own timeouts

	mu     sync.Mutex
	clones map[transportKey]*http.Transport
}

type transportKey struct {
	tlsHandshake, responseHeader time.Duration
	// tenant keeps each tenant's pooled connections its own: a connection
	// dialled under one tenant's address policy never serves another's.
	tenant string
}

// get returns the transport for timeouts t, of a tenant ("" for none).
func (ts *transportSet) get(t Timeouts, tenant string) *http.Transport {
	k := transportKey{t.TLSHandshake, t.ResponseHeader, tenant}
	if k == (transportKey{ts.base.TLSHandshakeTimeout, ts.base.ResponseHeaderTimeout, ""}) {
		return ts.base
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tr, ok := ts.clones[k]; ok {
		return tr
	}
	tr := ts.base.Clone()
	tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout = k.tlsHandshake, k.responseHeader
	if ts.clones == nil {
		ts.clones = make(map[transportKey]*http.Transport)
	}
	ts.clones[k] = tr
	return tr
}

// reset closes the idle connections of every transport (they were judged
// under the old policy) and forgets the clones; requests still using one
// finish on it.
func (ts *transportSet) reset() {
	ts.base.CloseIdleConnections()
	ts.mu.Lock()
	clones := ts.clones
	ts.clones = nil
	ts.mu.Unlock()
	for _, tr := range clones {
		tr.CloseIdleConnections()
	}
}
