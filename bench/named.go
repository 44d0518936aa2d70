//go:build linux

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Shared by the mitm and transparent scenarios: a TLS upstream with a
// certificate for names under bench.test, a DNS server in this process that
// resolves them, and load loops that address the upstream by host:port
// (a name the gateway resolves), not by the IP literal the other scenarios use.
// The soak uses loopbackDNS too, and connect, newtunnel and download
// (scenarios.go) the load loops, with a hostTarget for the IP literal.

// Names of the mitm and transparent scenarios. startNamedDNS answers dnsTestHost
// with dnsTestAddr (a documentation address, public for the address policy,
// so the sandbox's DNS server answers it) and every other name under
// bench.test with 127.0.0.1.
const (
	mitmEnvHost   = "mitm-env.bench.test"   // transform with ${env:}: a secret, so the scrubber is on
	mitmLitHost   = "mitm-lit.bench.test"   // transform with a literal value: no secret, no scrubber
	mitmPlainHost = "plain.bench.test"      // no transform: an opaque tunnel
	leafSuffix    = ".leaf.bench.test"      // *.leaf.bench.test: a transform entry, a new leaf per name
	tpHost        = "tp.bench.test"         // the transparent scenario's SNI name
	dnsTestHost   = "dns.bench.test"        // the sandbox DNS figure's name
	dnsTestAddr   = "198.51.100.7"          // TEST-NET-2: public for the address policy; never dialled
	tpDialAddr    = "203.0.113.10"          // TEST-NET-3: what the sandboxed client dials (redirected inside the namespace)
	tpDNSAddr     = "203.0.113.53:53"       // likewise for DNS queries from the sandbox
	mitmLiteral   = "Bearer not-a-secret-1" // the literal transform value
)

// namedUpstream is a TLS-only HTTP/1.1 origin (/small, /download as in
// upstream.go) whose certificate covers the names above; its PEM is the
// gateway's upstream.ca_file.
type namedUpstream struct {
	*upstream
	addr    netip.AddrPort
	pool    *x509.CertPool
	pemPath string
}

func startNamedUpstream(pemPath string, bodySize int) (*namedUpstream, error) {
	cert, pool, err := selfSigned(mitmEnvHost, mitmLitHost, mitmPlainHost, "*"+leafSuffix, tpHost)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		return nil, err
	}
	u, mux := newUpstream(bodySize)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(discardWriter{}, "", 0),
	}
	go srv.Serve(tls.NewListener(l, srv.TLSConfig)) //nolint:errcheck // ends at Close
	u.servers = []*http.Server{srv}
	return &namedUpstream{upstream: u, addr: netip.MustParseAddrPort(l.Addr().String()), pool: pool, pemPath: pemPath}, nil
}

// loopbackDNS is a DNS server in this process, UDP and TCP on one loopback
// port: A queries for the names lookup knows get its address, other types
// for them no answer, anything else NXDOMAIN. It counts the queries it gets
// (they run on the bench core, so a figure that makes them says how many),
// and apart those for the watched name.
type loopbackDNS struct {
	addr    string
	servers []*dns.Server
	// lookup gets the question's name lower-cased, fully qualified; nil:
	// NXDOMAIN.
	lookup         func(name string) net.IP
	watch          string // fully qualified; "" watches nothing
	queries        atomic.Int64
	watchedQueries atomic.Int64 // queries for watch
	shutdown       sync.Once
}

// startNamedDNS is the gateway's upstream resolver in the mitm and
// transparent scenarios (network.dns.servers): A for names under bench.test
// (dnsTestHost: dnsTestAddr, others 127.0.0.1), no AAAA, NXDOMAIN for
// anything else.
func startNamedDNS() (*loopbackDNS, error) {
	return startLoopbackDNS("", func(name string) net.IP {
		switch {
		case !strings.HasSuffix(name, ".bench.test."):
			return nil
		case name == dns.Fqdn(dnsTestHost):
			return net.ParseIP(dnsTestAddr)
		}
		return net.IPv4(127, 0, 0, 1)
	})
}

func startLoopbackDNS(watch string, lookup func(name string) net.IP) (*loopbackDNS, error) {
	s := &loopbackDNS{lookup: lookup, watch: watch}
	var pc net.PacketConn
	var tl net.Listener
	var err error
	// TCP first: after a soak, thousands of loopback TCP ports are in use or
	// in TIME_WAIT, UDP ports are not; then UDP on the same port.
	for attempt := 0; attempt < 20; attempt++ {
		if tl, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		if pc, err = net.ListenPacket("udp", tl.Addr().String()); err == nil {
			break
		}
		tl.Close()
	}
	if err != nil {
		return nil, err
	}
	s.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	s.servers = []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: tl, Handler: h}}
	for _, srv := range s.servers {
		go srv.ActivateAndServe() //nolint:errcheck // ends at Shutdown
	}
	return s, nil
}

func (s *loopbackDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	s.queries.Add(1)
	if s.watch != "" && len(req.Question) > 0 && strings.EqualFold(req.Question[0].Name, s.watch) {
		s.watchedQueries.Add(1)
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	var ip net.IP
	if len(req.Question) == 1 {
		ip = s.lookup(strings.ToLower(req.Question[0].Name))
	}
	if ip == nil {
		m.Rcode = dns.RcodeNameError
	} else if q := req.Question[0]; q.Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A:   ip,
		})
	}
	_ = w.WriteMsg(m)
}

func (s *loopbackDNS) close() {
	s.shutdown.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range s.servers {
			_ = srv.ShutdownContext(ctx)
		}
	})
}

// hostTarget is where a TLS client goes: through the CONNECT proxy gw to
// addr, or (gw == "") straight to addr; addr is host:port and also the
// request's Host. tls names the host the certificate is checked for.
type hostTarget struct {
	gw    string
	addr  string
	gwPID int
	tls   *tls.Config
}

// tlsKeepAliveLoad: each client holds one TLS connection and sends
// sequential GET /small on it.
func tlsKeepAliveLoad(t hostTarget, cfg loadConfig) measurement {
	req := getRequest(t.addr, "/small", false)
	cfg.gwPID = t.gwPID
	return runLoad(cfg, func(ctx context.Context, deadline time.Time) (session, error) {
		tc, err := dialTLS(ctx, t.gw, t.addr, t.tls)
		if err != nil {
			return nil, err
		}
		tc.SetDeadline(deadline)
		return keepAlive{newConn(tc, req)}, nil
	})
}

// tlsNewConnLoad: per request a new TCP connection (+ CONNECT) + full TLS
// handshake + GET /small + close.
func tlsNewConnLoad(t hostTarget, cfg loadConfig) measurement {
	req := getRequest(t.addr, "/small", false)
	cfg.gwPID = t.gwPID
	return runLoad(cfg, func(ctx context.Context, deadline time.Time) (session, error) {
		return oneShot{ctx: ctx, deadline: deadline, open: func(ctx context.Context) (*conn, error) {
			tc, err := dialTLS(ctx, t.gw, t.addr, t.tls)
			if err != nil {
				return nil, err
			}
			return newConn(tc, req), nil
		}}, nil
	})
}

// tlsDownload: one TLS connection, a warm-up of up to 32 MiB, then one
// response of size bytes, read and discarded; throughput in MiB/s.
func tlsDownload(t hostTarget, size int64, timeout time.Duration) measurement {
	var m measurement
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fail := func(err error) measurement {
		m.Errors++
		m.FirstError = err.Error()
		return m
	}
	tc, err := dialTLS(ctx, t.gw, t.addr, t.tls)
	if err != nil {
		return fail(err)
	}
	defer tc.Close()
	if d, ok := ctx.Deadline(); ok {
		tc.SetDeadline(d)
	}
	k := newConn(tc, nil)
	k.buf = make([]byte, 256<<10)
	get := func(n int64) error {
		k.req = getRequest(t.addr, "/download?n="+strconv.FormatInt(n, 10), false)
		got, err := k.roundTrip()
		if err == nil && got != n {
			err = fmt.Errorf("downloaded %d of %d bytes", got, n)
		}
		return err
	}
	if err := get(min(size, 32<<20)); err != nil {
		return fail(err)
	}
	s0 := snapCPU(t.gwPID)
	if err := get(size); err != nil {
		return fail(err)
	}
	s1 := snapCPU(t.gwPID)
	el := s1.at.Sub(s0.at).Seconds()
	m.Requests, m.Bytes, m.Seconds = 1, size, el
	m.MiBps = float64(size) / (1 << 20) / el
	s0.fill(s1, &m)
	return m
}

// tlsFor is a client config that trusts pool for serverName, no session
// cache (every new connection is a full handshake).
func tlsFor(pool *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}

// pairRetry runs f (one direct/proxied attempt producing rows) until the
// rows are clean (other load ≤ maxOther) or retries are used up, and keeps
// the least contaminated attempt.
func pairRetry(retries int, maxOther float64, f func(attempt int) ([]row, float64)) []row {
	var best []row
	bestOther := 0.0
	for attempt := 1; ; attempt++ {
		rows, other := f(attempt)
		if attempt == 1 || other < bestOther {
			best, bestOther = rows, other
			for i := range best {
				best[i].Attempts = attempt
			}
		}
		if other <= maxOther || attempt > retries {
			return best
		}
	}
}
