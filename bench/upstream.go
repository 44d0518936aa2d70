//go:build linux

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// upstream is the origin both the direct and the proxied runs talk to: one
// net/http server on two loopback listeners, plain HTTP and TLS (HTTP/1.1
// only), with a self-signed certificate made at start. Clients trust that
// certificate explicitly (clientTLS); nothing skips verification.
type upstream struct {
	httpAddr, tlsAddr netip.AddrPort
	clientTLS         *tls.Config // trusts our certificate, for ServerName 127.0.0.1
	small             []byte
	pattern           []byte
	servers           []*http.Server
}

const patternSize = 64 << 10

func startUpstream(bodySize int) (*upstream, error) {
	cert, pool, err := selfSigned()
	if err != nil {
		return nil, err
	}
	u, mux := newUpstream(bodySize)
	u.clientTLS = &tls.Config{
		RootCAs:    pool,
		ServerName: "127.0.0.1", // an IP literal: verified against the IP SAN, no SNI sent
		MinVersion: tls.VersionTLS12,
		// No ClientSessionCache: every new connection is a full handshake.
	}

	newServer := func() *http.Server {
		return &http.Server{
			Handler:      mux,
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
			// Idle tunnels stay idle for the whole memory measurement.
			IdleTimeout: 10 * time.Minute,
			ErrorLog:    log.New(discardWriter{}, "", 0),
		}
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		return nil, err
	}
	hs, ts := newServer(), newServer()
	ts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go hs.Serve(hl)                                //nolint:errcheck // ends at Close
	go ts.Serve(tls.NewListener(tl, ts.TLSConfig)) //nolint:errcheck
	u.servers = []*http.Server{hs, ts}
	u.httpAddr = netip.MustParseAddrPort(hl.Addr().String())
	u.tlsAddr = netip.MustParseAddrPort(tl.Addr().String())
	return u, nil
}

// newUpstream is an upstream without listeners yet: its bodies, and a mux
// serving /small and /download from them.
func newUpstream(bodySize int) (*upstream, *http.ServeMux) {
	u := &upstream{small: make([]byte, bodySize), pattern: make([]byte, patternSize)}
	for i := range u.small {
		u.small[i] = 'a' + byte(i%26)
	}
	for i := range u.pattern {
		u.pattern[i] = byte(i * 7)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/small", u.serveSmall)
	mux.HandleFunc("/download", u.serveDownload)
	return u, mux
}

func (u *upstream) close() {
	for _, s := range u.servers {
		s.Close()
	}
}

func (u *upstream) serveSmall(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain"}
	h["Content-Length"] = []string{strconv.Itoa(len(u.small))}
	w.Write(u.small) //nolint:errcheck
}

// serveDownload streams n bytes (?n=) from a 64 KiB pattern: no allocation
// proportional to n.
func (u *upstream) serveDownload(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "bad n", http.StatusBadRequest)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/octet-stream"}
	h["Content-Length"] = []string{strconv.FormatInt(n, 10)}
	for n > 0 {
		chunk := u.pattern
		if int64(len(chunk)) > n {
			chunk = chunk[:n]
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		n -= int64(len(chunk))
	}
}

// selfSigned makes an ECDSA P-256 certificate for 127.0.0.1, bench.test and
// any extra DNS names given.
func selfSigned(names ...string) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "hookgate bench upstream"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              append([]string{"bench.test"}, names...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
