package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// ServeTransparent accepts connections that nftables redirected to ln from
// a sandbox that has no proxy settings, until Shutdown. Each connection is
// told apart by its first byte: a TLS ClientHello names its host by SNI, an
// HTTP request by its Host header; anything else is closed and logged as
// blocked-by-protocol. From there it is the pipeline of explicit mode —
// allowlist, guarded dial of the name that was allowed (never the address
// the sandbox aimed at), tunnel or interception, one decision line. TLS
// without SNI is judged by the original destination as an IP literal.
//
// One exception: a connection to an address the gateway's DNS server
// answered to this client, on one of the raw_ports of the answered name's
// entry, that is neither TLS nor HTTP is relayed raw under that name (see
// serveTransparentRawPort).
func (s *Server) ServeTransparent(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.transparent = append(s.transparent, ln)
	s.mu.Unlock()
	ln = &limitedListener{Listener: ln, s: s}
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go s.serveTransparentConn(c)
	}
}

func (s *Server) serveTransparentConn(c net.Conn) {
	d := newDecision(&s.sink, c.RemoteAddr().String(), modeTunnel)
	d.transparent = true
	ss := s.newSession(c, d)

	orig, err := s.origDst(c)
	if err != nil {
		// Not redirected (someone dialled the listener itself): its own
		// address is the destination, which the address policy refuses.
		orig, _ = netip.ParseAddrPort(c.LocalAddr().String())
	}
	d.port = orig.Port()
	client := clientIP(c.RemoteAddr().String())
	id, idDen := identifyAddr(s.policy.Load(), client)
	d.tenant = id.tenant

	if name := s.rawName(id.policy, client, orig); name != "" {
		s.serveTransparentRawPort(ss, orig, id, idDen, name)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(s.timeouts.ReadHeader))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		d.refuse(deny(CodeProtocol, 0, "", "nothing was sent: %v", helloErrReason(err)))
		ss.end()
		return
	}
	switch b := first[0]; {
	case b == 0x16:
		if idDen == nil {
			idDen = s.admitTenant(d, id, true)
		}
		s.serveTransparentTLS(ss, first[:], orig, id, idDen)
	case b >= 'A' && b <= 'Z':
		_ = c.SetReadDeadline(time.Time{})
		d.mode = modeHTTP
		s.serveTransparentHTTP(ss, first[:], orig)
	default:
		d.host = orig.Addr().String()
		d.refuse(deny(CodeProtocol, 0, d.host, "only HTTP and TLS are let through; the first byte was 0x%02x", b))
		ss.end()
	}
}

func (s *Server) serveTransparentTLS(ss *session, first []byte, orig netip.AddrPort, id identity, idDen *denial) {
	c, d := ss.client, ss.d
	hello, helloBytes, err := peekClientHello(io.MultiReader(bytes.NewReader(first), c))
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		d.host = orig.Addr().String()
		_, _ = c.Write([]byte(tlsAlertAccessDenied))
		d.refuse(deny(CodeProtocol, 0, d.host, "not a TLS ClientHello: %v", helloErrReason(err)))
		ss.end()
		return
	}
	helloBytes = append(first[:0:0], helloBytes...)
	d.sni = hello.ServerName
	rawHost := hello.ServerName
	if rawHost == "" {
		rawHost = orig.Addr().Unmap().String()
	}
	t, den := parseTarget(rawHost, strconv.Itoa(int(orig.Port())), 0)
	d.host, d.port = t.host, t.port
	if den == nil && idDen != nil {
		den = idDen
	}
	if den == nil {
		var adm admission
		if adm, den = s.admit(context.Background(), id.policy, t, d); den == nil {
			d.status = http.StatusOK
			s.openTunnel(ss, helloBytes, t, adm)
			return
		}
	}
	d.refuse(den)
	s.denyOverTLS(ss.client, helloBytes, t, den)
	ss.end()
}

// denyOverTLS tells a refused TLS client why, readably, when it can: with a
// certificate from our CA for the name it asked for (a sandbox trusts the
// CA), it answers the first request with the same 403 as explicit mode.
// Without a CA or a name, or when the client refuses the certificate, the
// client gets a TLS access_denied alert.
func (s *Server) denyOverTLS(c net.Conn, helloBytes []byte, t target, den *denial) {
	if s.leaves == nil || t.host == "" {
		_, _ = c.Write([]byte(tlsAlertAccessDenied))
		return
	}
	_ = c.SetDeadline(time.Now().Add(s.timeouts.ClientHello))
	tc := tls.Server(&replayConn{Conn: c, replay: helloBytes}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.leaves.Get(t.host)
		},
	})
	if err := tc.Handshake(); err != nil {
		return
	}
	req, err := http.ReadRequest(bufio.NewReaderSize(tc, 4096))
	if err == nil && req.Body != nil {
		_ = req.Body.Close()
	}
	resp := den.response(req)
	resp.Close = true
	resp.Header.Set("Connection", "close")
	_ = resp.Write(tc)
	_ = tc.Close()
}

// serveTransparentHTTP serves the plain-HTTP requests of one redirected
// connection: each is routed by its Host header (the original destination's
// port when the header has none) and forwarded exactly like an
// absolute-form request in explicit mode.
func (s *Server) serveTransparentHTTP(ss *session, first []byte, orig netip.AddrPort) {
	fc := newFramingConn(s.watch(&replayConn{Conn: ss.client, replay: first}, ss.d), s.maxHdr)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The connection became requests: each has its own line.
		ss.d.handOff()
		if den := fc.refusalFor(r); den != nil {
			d := newDecision(&s.sink, ss.d.client, modeHTTP)
			d.transparent, d.tenant = true, ss.d.tenant
			d.answer(w, den)
			return
		}
		host := r.Host
		if _, _, err := net.SplitHostPort(host); err != nil && host != "" {
			host = net.JoinHostPort(trimBrackets(host), strconv.Itoa(int(orig.Port())))
		}
		if host == "" {
			host = orig.String()
		}
		r.URL.Scheme, r.URL.Host = "http", host
		s.forwarder.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), transparentKey{}, true)))
	})
	s.serveHTTPConn(fc, handler)
	ss.end()
}

type transparentKey struct{}

func trimBrackets(h string) string {
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}
