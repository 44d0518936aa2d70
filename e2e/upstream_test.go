package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Files in the directory shared with the upstream role.
const (
	certFile    = "upstream-cert.pem"
	keyFile     = "upstream-key.pem"
	recordsFile = "upstream-records.jsonl"
	readyFile   = "upstream-ready"
)

// The addresses of the veth pair (TEST-NET-3, RFC 5737).
var (
	gatewayIP  = netip.MustParseAddr("203.0.113.1")
	upstreamIP = netip.MustParseAddr("203.0.113.2")
)

// dnsTable is what the upstream's DNS server answers, for A queries; AAAA
// queries get an empty answer, other names NXDOMAIN. denied.test resolves to
// the upstream, so that a gateway that ignored its allowlist would reach it.
var dnsTable = map[string][]netip.Addr{
	"allowed.test.":     {upstreamIP},
	"www.allowed.test.": {upstreamIP},
	"loopback.test.":    {netip.MustParseAddr("127.0.0.1")},
	"metadata.test.":    {netip.MustParseAddr("169.254.169.254")},
	"mixed.test.":       {upstreamIP, netip.MustParseAddr("10.0.0.1")},
	"denied.test.":      {upstreamIP},
}

// record is one thing the upstream got: a TCP connection ("accept"), a TLS
// ClientHello ("tls"), an HTTP request ("http") or a DNS question ("dns").
type record struct {
	Kind   string      `json:"kind"`
	Port   int         `json:"port,omitempty"`   // accept: local port
	Remote string      `json:"remote,omitempty"` // peer address
	Host   string      `json:"host,omitempty"`   // http: Host; tls: SNI; dns: question name
	Method string      `json:"method,omitempty"`
	URI    string      `json:"uri,omitempty"`
	TLS    bool        `json:"tls,omitempty"`
	Header http.Header `json:"header,omitempty"`
	QType  string      `json:"qtype,omitempty"`
	Net    string      `json:"net,omitempty"`
}

func (r record) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// recorder appends records, one JSON line each, to a file the test reads.
type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func (r *recorder) add(rec record) {
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "e2e upstream: recording:", err)
	}
}

// readRecords reads what the upstream recorded so far (complete lines only).
func readRecords(path string) ([]record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var out []record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s: bad record %q: %v", path, sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// recordingListener records every accepted connection.
type recordingListener struct {
	net.Listener
	rec  *recorder
	port int
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.rec.add(record{Kind: "accept", Port: l.port, Remote: c.RemoteAddr().String()})
	}
	return c, err
}

// upstream is the upstream role: the host every allowed request goes to.
type upstream struct {
	rec *recorder
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.rec.add(record{
		Kind: "http", Host: r.Host, Method: r.Method, URI: r.RequestURI,
		TLS: r.TLS != nil, Remote: r.RemoteAddr, Header: r.Header.Clone(),
	})
	w.Header().Set("X-Upstream", "hookgate-e2e")
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "upstream saw %s %s\n", r.Host, r.RequestURI)
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		u.rec.add(record{
			Kind: "dns", Host: name, QType: dns.TypeToString[q.Qtype],
			Net: w.RemoteAddr().Network(), Remote: w.RemoteAddr().String(),
		})
		addrs, ok := dnsTable[name]
		if !ok {
			m.Rcode = dns.RcodeNameError
			continue
		}
		if q.Qtype != dns.TypeA {
			continue
		}
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.IP(a.AsSlice()),
			})
		}
	}
	_ = w.WriteMsg(m)
}

// runUpstream serves HTTP on :80, HTTPS on :443 and DNS on :53 (UDP and TCP)
// of $HOOKGATE_E2E_ADDR until its stdin closes (the test's lifeline) or it
// gets SIGTERM/SIGINT. It writes the ready file once every socket is bound.
func runUpstream() error {
	dir := os.Getenv(dirEnv)
	addr, err := netip.ParseAddr(os.Getenv(addrEnv))
	if dir == "" || err != nil {
		return fmt.Errorf("need %s and %s (got %q, %q)", dirEnv, addrEnv, dir, os.Getenv(addrEnv))
	}
	f, err := os.OpenFile(filepath.Join(dir, recordsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	u := &upstream{rec: &recorder{f: f}}

	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	if err != nil {
		return err
	}
	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			u.rec.add(record{Kind: "tls", Host: hello.ServerName, Remote: hello.Conn.RemoteAddr().String()})
			return nil, nil
		},
	}

	listen := func(port int) (net.Listener, error) {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		if err != nil {
			return nil, err
		}
		return recordingListener{Listener: ln, rec: u.rec, port: port}, nil
	}
	httpLn, err := listen(80)
	if err != nil {
		return err
	}
	httpsLn, err := listen(443)
	if err != nil {
		return err
	}
	sshLn, err := listen(22)
	if err != nil {
		return err
	}
	go serveSSHLike(sshLn)
	dnsAddr := netip.AddrPortFrom(addr, 53).String()
	udpConn, err := net.ListenPacket("udp", dnsAddr)
	if err != nil {
		return err
	}
	tcpDNS, err := net.Listen("tcp", dnsAddr)
	if err != nil {
		return err
	}

	httpSrv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	httpsSrv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, TLSConfig: tlsConf}
	udpSrv := &dns.Server{PacketConn: udpConn, Handler: u}
	tcpSrv := &dns.Server{Listener: tcpDNS, Handler: u}

	errc := make(chan error, 4)
	go func() { errc <- httpSrv.Serve(httpLn) }()
	go func() { errc <- httpsSrv.Serve(tls.NewListener(httpsLn, tlsConf)) }()
	go func() { errc <- udpSrv.ActivateAndServe() }()
	go func() { errc <- tcpSrv.ActivateAndServe() }()

	if err := os.WriteFile(filepath.Join(dir, readyFile), []byte("ready\n"), 0o644); err != nil {
		return err
	}

	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var serveErr error
	select {
	case <-stop:
	case <-sig:
	case serveErr = <-errc:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(ctx)
	_ = httpsSrv.Shutdown(ctx)
	_ = udpSrv.ShutdownContext(ctx)
	_ = tcpSrv.ShutdownContext(ctx)
	_ = sshLn.Close()
	if serveErr != nil {
		return fmt.Errorf("serving: %w", serveErr)
	}
	return nil
}

// serveSSHLike answers on port 22 as an SSH server starts: its banner
// first, then "ok:" and the line the client sent, then it hangs up.
func serveSSHLike(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(c, sshBanner)
			line, err := bufio.NewReader(io.LimitReader(c, 4096)).ReadString('\n')
			if err == nil {
				_, _ = io.WriteString(c, "ok:"+line)
			}
		}()
	}
}

// sshBanner is what the upstream's port 22 says first.
const sshBanner = "SSH-2.0-OpenSSH_9.6 hookgate-e2e\r\n"
