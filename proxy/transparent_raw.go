package proxy

import (
	"bytes"
	"context"

	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/hookgate/hookgate/config"
)

// rawFirstBytesWait bounds how long a redirected connection on a raw port
// may stay silent before it is relayed raw (capped by the ClientHello
// timeout). SSH servers speak first, so a client may send nothing until
// it hears the server; OpenSSH sends its own banner at once, and so never
// waits here.
const rawFirstBytesWait = time.Second

// httpMethodPrefixes are the request-line starts that keep a connection on
// a raw port on the HTTP path. Any other first bytes (an SSH banner,
// "SSH-2.0-...") go raw. Each is at most sniffLen bytes long.
var httpMethodPrefixes = [...]string{
	"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "CONNECT ", "OPTIONS ", "TRACE ", "PATCH ", "PRI ",
}

// sniffLen is how many first bytes tell HTTP from raw: the longest prefix
// of httpMethodPrefixes.
const sniffLen = 8

// firstBytes is what a raw-port connection's first bytes turned out to be.
type firstBytes int

const (
	firstUndecided firstBytes = iota
	firstTLS
	firstHTTP
	firstRaw
)

// rawName is the name a redirected connection to orig may be relayed raw
// under: one the DNS memory holds for this client and address whose
// allowlist entry, in the client's policy, lists orig's port in raw_ports.
// "" when there is none, and the connection takes the usual path.
func (s *Server) rawName(p *config.Policy, client netip.Addr, orig netip.AddrPort) string {
	if s.names == nil || !client.IsValid() {
		return ""
	}
	for _, name := range s.names.Names(client, orig.Addr().Unmap()) {
		if v := p.Decide(name); v.Allowed && v.Entry.RawPort(orig.Port()) {
			return name
		}
	}
	return ""
}

// serveTransparentRawPort serves a redirected connection that may be a raw
// tunnel to name (see rawName). A ClientHello or an HTTP request takes the
// usual transparent path; anything else, or silence for
// rawFirstBytesWait, is a raw tunnel.
func (s *Server) serveTransparentRawPort(ss *session, orig netip.AddrPort, id identity, idDen *denial, name string) {
	c, d := ss.client, ss.d
	first, kind, err := sniffFirstBytes(c, min(s.timeouts.ClientHello, rawFirstBytesWait))
	switch {
	case kind == firstTLS:
		_ = c.SetReadDeadline(time.Now().Add(s.timeouts.ReadHeader))
		if idDen == nil {
			idDen = s.admitTenant(d, id, true)
		}
		s.serveTransparentTLS(ss, first, orig, id, idDen)
	case kind == firstHTTP:
		_ = c.SetReadDeadline(time.Time{})
		d.mode = modeHTTP
		s.serveTransparentHTTP(ss, first, orig)
	case len(first) == 0 && !isTimeout(err):
		d.refuse(deny(CodeProtocol, 0, "", "nothing was sent: %v", helloErrReason(err)))
		ss.end()
	default:
		_ = c.SetReadDeadline(time.Time{})
		s.serveTransparentRaw(ss, first, orig, id, idDen, name)
	}
}

// sniffFirstBytes reads up to sniffLen bytes, within wait, until they tell
// TLS, HTTP and raw apart. Silence (a timeout with nothing read) is raw;
// a started request line the client stopped in is HTTP, as it would be on
// any other port. err is the read error that ended it, if any.
func sniffFirstBytes(c net.Conn, wait time.Duration) ([]byte, firstBytes, error) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 0, sniffLen)
	var err error
	for i := 0; i < sniffLen && len(buf) < sniffLen; i++ {
		var n int
		n, err = c.Read(buf[len(buf):sniffLen])
		buf = buf[:len(buf)+n]
		if k := classifyFirstBytes(buf); k != firstUndecided {
			return buf, k, nil
		}
		if err != nil {
			break
		}
	}
	switch {
	case len(buf) == 0 && isTimeout(err):
		return nil, firstRaw, err
	case len(buf) == 0:
		return nil, firstUndecided, err
	}
	return buf, firstHTTP, err
}

// classifyFirstBytes tells what b, a connection's first bytes, start.
func classifyFirstBytes(b []byte) firstBytes {
	switch {
	case len(b) == 0:
		return firstUndecided
	case b[0] == 0x16:
		return firstTLS
	case b[0] < 'A' || b[0] > 'Z':
		return firstRaw
	}
	undecided := false
	for _, m := range httpMethodPrefixes {
		switch {
		case bytes.HasPrefix(b, []byte(m)):
			return firstHTTP
		case bytes.HasPrefix([]byte(m), b):
			undecided = true
		}
	}
	if undecided {
		return firstUndecided
	}
	return firstRaw
}

// serveTransparentRaw relays a raw tunnel to exactly the original
// destination, under the name the DNS server answered for it: the name is
// judged with the current policy (allowlist, ports, and the address policy
// and pins on the original destination's address, never a fresh lookup of
// the name), and the tunnel is logged as one decision line of mode raw.
func (s *Server) serveTransparentRaw(ss *session, early []byte, orig netip.AddrPort, id identity, idDen *denial, name string) {
	d := ss.d
	d.mode = modeRaw
	t := target{host: name, port: orig.Port()}
	d.host, d.port = t.host, t.port
	if idDen == nil {
		idDen = s.admitTenant(d, id, true)
	}
	if idDen != nil {
		d.refuse(idDen)
		ss.end()
		return
	}
	adm, den := s.admitRaw(id.policy, t, orig.Addr().Unmap(), d)
	if den != nil {
		d.refuse(den)
		ss.end()
		return
	}
	d.status = http.StatusOK
	s.openRaw(ss, early, t, adm)
}

// admitRaw judges a raw tunnel to name t.host at the address addr: Judge
// with addr as the only address, so that the address policy and the
// entry's pins judge exactly what is dialled.
func (s *Server) admitRaw(p *config.Policy, t target, addr netip.Addr, d *decision) (admission, *denial) {
	d.generation = p.Generation
	only := func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{addr}, nil }
	v, addrs, err := p.Judge(context.Background(), t.host, addr, t.port, only)
	d.entry = v.Pattern
	if err != nil {
		return admission{}, classifyUpstream(err, t.host)
	}
	if !v.Entry.RawPort(t.port) {
		// The policy changed since rawName looked.
		return admission{}, deny(CodeProtocol, 0, t.host, "port %d is not among the raw_ports of %s", t.port, t.host)
	}
	tm := s.timeoutsFor(p, v.Entry)
	return admission{verdict: v, dest: Target{Host: t.host, Port: t.port, Addrs: addrs}, guard: s.guardFor(p, v.Entry, tm), timeouts: tm}, nil
}
