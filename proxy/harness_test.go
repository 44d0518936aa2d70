package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/testlog"
)

// staticResolver answers from a table; a name not in it does not exist.
// It records every lookup so tests can prove a name was never resolved.
type staticResolver struct {
	mu      sync.Mutex
	table   map[string][]netip.Addr
	lookups []string
}

func (r *staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups = append(r.lookups, host)
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *staticResolver) looked(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.lookups {
		if h == host {
			return true
		}
	}
	return false
}

// logBuffer is the gateway's log, read back by decision line.
type logBuffer struct{ testlog.Buffer }

// decisions returns the parsed decision lines.
func (b *logBuffer) decisions(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range b.Lines(t) {
		if m["message"] == "decision" {
			out = append(out, m)
		}
	}
	return out
}

// waitDecisions waits (bounded) for the n-th decision line: a
// line is written when its request ends, which can be just after the
// client has read the response.
func (b *logBuffer) waitDecisions(t *testing.T, n int) []map[string]any {
	t.Helper()
	var d []map[string]any
	b.Wait(t, 5*time.Second, func(string) bool { d = b.decisions(t); return len(d) >= n })
	if len(d) != n {
		t.Fatalf("want %d decision lines, got %d:\n%s", n, len(d), b.String())
	}
	return d
}

// gateway is a proxy under test, serving on loopback.
type gateway struct {
	srv      *Server
	addr     string
	logs     *logBuffer
	resolver *staticResolver
}

type gatewayConfig struct {
	allow    []string
	exempt   []string // IP:PORT exempt from the address policy (the test upstreams)
	cidrs    []string
	names    map[string][]string
	timeouts Timeouts
	roots    *httptest.Server // trust this TLS server's certificate upstream
	rootPool *x509.CertPool   // or exactly these roots upstream
	entries  []config.Entry   // by allowlist index
	leaves   *ca.LeafCache    // for MITM
	limits   Limits
	observer Observer
	report   bool // network.mode: report
	// policy, if set, replaces the policy built from allow, cidrs and
	// entries (a compiled config with tenants).
	policy *config.Policy
	// parkAfter, if set, replaces defaultParkAfter (negative: never park).
	parkAfter time.Duration
	// logLevel is the gateway's lowest level logged (zero: debug, which is
	// everything the proxy logs, kept for the test's failure output).
	logLevel zerolog.Level
}

func startGateway(t testing.TB, gc gatewayConfig) *gateway {
	t.Helper()
	al, err := allowlist.New(gc.allow)
	if err != nil {
		t.Fatalf("allowlist: %v", err)
	}
	var opts allowlist.AddrPolicyOptions
	for _, e := range gc.exempt {
		opts.Exempt = append(opts.Exempt, netip.MustParseAddrPort(e))
	}
	for _, c := range gc.cidrs {
		opts.AllowCIDRs = append(opts.AllowCIDRs, netip.MustParsePrefix(c))
	}
	addrs, err := allowlist.NewAddrPolicy(opts)
	if err != nil {
		t.Fatalf("address policy: %v", err)
	}
	res := &staticResolver{table: map[string][]netip.Addr{}}
	for name, list := range gc.names {
		for _, a := range list {
			res.table[name] = append(res.table[name], netip.MustParseAddr(a))
		}
	}
	logs := &logBuffer{}
	o := Options{
		Policy:   &config.Policy{Allowlist: al, Addrs: addrs, Entries: gc.entries, Report: gc.report, Generation: 1},
		Leaves:   gc.leaves,
		Resolver: res,
		Logger:   zerolog.New(logs).Level(gc.logLevel),
		Timeouts: gc.timeouts,
		Limits:   gc.limits,
		Observer: gc.observer,
	}
	if gc.policy != nil {
		o.Policy = gc.policy
	}
	if gc.roots != nil {
		o.UpstreamRoots = gc.roots.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	}
	if gc.rootPool != nil {
		o.UpstreamRoots = gc.rootPool
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if gc.parkAfter != 0 {
		srv.parkAfter = max(gc.parkAfter, 0)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	return &gateway{srv: srv, addr: ln.Addr().String(), logs: logs, resolver: res}
}

// client returns an HTTP client that uses the gateway as its proxy and
// trusts tlsSrv's certificate (if given).
func (g *gateway) client(t *testing.T, tlsSrv *httptest.Server) *http.Client {
	t.Helper()
	proxyURL, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}
	if tlsSrv != nil {
		tr.TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// raw sends raw bytes to the gateway and returns everything it answers until
// it closes the connection or a second passes.
func (g *gateway) raw(t *testing.T, request string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", g.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(c)
	return out.String()
}

// upstream is a test origin that counts the requests it serves.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

// newUpstream starts a test origin; configure, if given, adjusts its server
// before it starts (setting fields later would race with it).
func newUpstream(t testing.TB, useTLS bool, h http.HandlerFunc, configure ...func(*http.Server)) *upstream {
	t.Helper()
	u := &upstream{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Clone(context.Background()))
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		_, _ = w.Write([]byte("hello from upstream"))
	})
	u.Server = httptest.NewUnstartedServer(handler)
	// Handshakes the gateway refuses on purpose are expected; keep them out
	// of the test output.
	u.Config.ErrorLog = log.New(io.Discard, "", 0)
	for _, f := range configure {
		f(u.Config)
	}
	if useTLS {
		u.StartTLS()
	} else {
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.reqs...)
}

// hostPort is the upstream's listen address.
func (u *upstream) hostPort() string {
	return strings.TrimPrefix(strings.TrimPrefix(u.URL, "https://"), "http://")
}

func (u *upstream) port() string {
	_, p, _ := net.SplitHostPort(u.hostPort())
	return p
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
