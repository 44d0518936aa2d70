package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/ca"

	"github.com/hookgate/hookgate/internal/testlog"
)

// testDNS serves A records for a fixed table on loopback, so that the
// gateway's names resolve to the test's upstreams.
func testDNS(t *testing.T, names map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		if ip, ok := names[strings.TrimSuffix(q.Name, ".")]; ok && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(ip)})
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// servedGateway is `gateway serve` running in-process.
type servedGateway struct {
	proxyAddr, adminAddr string
	configFile           string
	stop                 context.CancelFunc
	done                 chan error
	logs                 *testlog.Buffer
}

func serveInProcess(t *testing.T, configYAML string, args ...string) *servedGateway {
	t.Helper()
	dir := t.TempDir()
	sg := &servedGateway{configFile: filepath.Join(dir, "gateway.yaml"), logs: &testlog.Buffer{}, done: make(chan error, 1)}
	if err := os.WriteFile(sg.configFile, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	sg.stop = cancel
	go func() {
		sg.done <- run(ctx, append([]string{"serve", "--config", sg.configFile, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...),
			nil, io.Discard, io.MultiWriter(pw, sg.logs))
		pw.Close()
	}()
	type addrs struct{ Message, Proxy, Admin string }
	found := make(chan addrs, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var a addrs
			if json.Unmarshal(sc.Bytes(), &a) == nil && a.Message == "gateway listening" {
				found <- a
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-found:
		sg.proxyAddr, sg.adminAddr = a.Proxy, a.Admin
	case err := <-sg.done:
		t.Fatalf("serve ended at start: %v\n%s", err, sg.logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() {
		sg.stop()
		select {
		case <-sg.done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	return sg
}

func (sg *servedGateway) admin(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+sg.adminAddr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (sg *servedGateway) rewrite(t *testing.T, configYAML string) {
	t.Helper()
	if err := os.WriteFile(sg.configFile, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
}

// opsEnv: a TLS upstream for several names, our CA, and a config that
// injects a token for inject.example.com.
type opsEnv struct {
	tlsUpstreamEnv // its pool also trusts the upstream
	token          string
	// A request for /slow reports its arrival on slowArrived, then waits
	// for releaseSlow to be closed (or for its client to leave).
	slowArrived chan struct{}
	releaseSlow chan struct{}
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	e := &opsEnv{token: "ops-canary-3f9d1c77e2", slowArrived: make(chan struct{}, 8), releaseSlow: make(chan struct{})}
	t.Setenv("HG_OPS_TOKEN", e.token)
	e.tlsUpstreamEnv = newTLSUpstreamEnv(t, []string{"example.com", "other.example.com", "inject.example.com"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			e.slowArrived <- struct{}{}
			select {
			case <-e.releaseSlow:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintf(w, "%s %s", r.Host, r.Header.Get("Authorization"))
	}))
	e.pool.AddCert(e.up.Certificate())
	return e
}

// tlsUpstreamEnv is what the served-gateway tests share: a TLS upstream
// (port) for some names, a DNS server (dnsAddr) answering them with
// 127.0.0.1, the gateway's CA in caDir, the upstream's certificate as a
// PEM file for upstream.ca_file, and a pool trusting the gateway's CA.
type tlsUpstreamEnv struct {
	up      *httptest.Server
	port    string
	dnsAddr string
	caDir   string
	upCA    string
	pool    *x509.CertPool
}

func newTLSUpstreamEnv(t *testing.T, names []string, h http.Handler) tlsUpstreamEnv {
	t.Helper()
	e := tlsUpstreamEnv{up: httptest.NewTLSServer(h)}
	t.Cleanup(e.up.Close)
	_, e.port, _ = net.SplitHostPort(e.up.Listener.Addr().String())
	answers := make(map[string]string, len(names))
	for _, n := range names {
		answers[n] = "127.0.0.1"
	}
	e.dnsAddr = testDNS(t, answers)
	e.caDir = t.TempDir()
	certPath, _, err := ca.Init(e.caDir)
	if err != nil {
		t.Fatal(err)
	}
	e.upCA = filepath.Join(t.TempDir(), "upstream.pem")
	if err := os.WriteFile(e.upCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ourCA, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	e.pool = x509.NewCertPool()
	e.pool.AppendCertsFromPEM(ourCA)
	return e
}

func (e *opsEnv) config(allow ...string) string {
	var b strings.Builder
	b.WriteString("network:\n  allowlist:\n")
	for _, a := range allow {
		fmt.Fprintf(&b, "    - domain: %q\n", a)
		if a == "inject.example.com" {
			b.WriteString("      transform: {Authorization: \"Bearer ${env:HG_OPS_TOKEN}\"}\n")
		}
	}
	fmt.Fprintf(&b, "  dns: {servers: [%q]}\nupstream: {ca_file: %q}\nca: {cert_file: %q, key_file: %q}\nlimits: {shutdown_grace: 3s}\n",
		e.dnsAddr, e.upCA, filepath.Join(e.caDir, "ca.pem"), filepath.Join(e.caDir, "ca-key.pem"))
	return b.String()
}

func (e *opsEnv) client(sg *servedGateway) *http.Client {
	proxyURL, _ := url.Parse("http://" + sg.proxyAddr)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: e.pool}}}
}

func (e *opsEnv) url(host, path string) string { return "https://" + host + ":" + e.port + path }

func (e *opsEnv) args() []string {
	return []string{"--test-allow-upstream", "127.0.0.1:" + e.port}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestReload(t *testing.T) {
	e := newOpsEnv(t)
	sg := serveInProcess(t, e.config("example.com"), e.args()...)
	kept := e.client(sg) // keeps its tunnel to example.com open across the reload
	defer kept.CloseIdleConnections()
	if code, body := get(t, kept, e.url("example.com", "/")); code != 200 {
		t.Fatalf("before reload: %d %s", code, body)
	}

	sg.rewrite(t, e.config("other.example.com"))
	if code, body := sg.admin(t, "POST", "/v1/reload"); code != 200 || !strings.Contains(body, `"generation":2`) {
		t.Fatalf("reload: %d %s", code, body)
	}
	fresh := e.client(sg)
	defer fresh.CloseIdleConnections()
	if code, _ := get(t, fresh, e.url("example.com", "/")); code != 0 {
		t.Fatalf("a new tunnel to a removed host got %d, want the CONNECT refused", code)
	}
	if code, _ := get(t, fresh, e.url("other.example.com", "/")); code != 200 {
		t.Fatalf("a newly allowed host: %d", code)
	}
	// The tunnel opened under the old policy goes on under it.
	if code, body := get(t, kept, e.url("example.com", "/again")); code != 200 {
		t.Fatalf("open tunnel after reload: %d %s", code, body)
	}

	// A broken file is refused with file, line and field; the old policy
	// keeps serving.
	sg.rewrite(t, "network:\n  allowlist:\n    - domain: \"https://x.example.com\"\n")
	code, body := sg.admin(t, "POST", "/v1/reload")
	if code != 422 || !strings.Contains(body, "gateway.yaml:3: network.allowlist[0].domain: a domain, not a URL") {
		t.Fatalf("broken reload: %d %s", code, body)
	}
	if code, _ := get(t, fresh, e.url("other.example.com", "/")); code != 200 {
		t.Fatalf("after a failed reload: %d", code)
	}
	_, metrics := sg.admin(t, "GET", "/metrics")
	for _, want := range []string{`hookgate_reloads_total{result="ok"} 1`, `hookgate_reloads_total{result="error"} 1`, `hookgate_config_generation 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestConcurrentReloadsUnderLoad: reloads racing requests (run with -race)
// leave no request failing except by the intended denial.
func TestConcurrentReloadsUnderLoad(t *testing.T) {
	e := newOpsEnv(t)
	sg := serveInProcess(t, e.config("example.com", "other.example.com"), e.args()...)
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.client(sg)
			defer c.CloseIdleConnections()
			for n := 0; n < 200; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if code, body := get(t, c, e.url("example.com", "/")); code != 200 {
					errs <- fmt.Sprintf("%d %s", code, body)
					return
				}
			}
		}()
	}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := sg.admin(t, "POST", "/v1/reload"); code != 200 {
				errs <- fmt.Sprintf("reload %d %s", code, body)
			}
		}()
	}
	time.AfterFunc(20*time.Second, func() { close(stop) })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMetricsAndNoSecrets(t *testing.T) {
	e := newOpsEnv(t)
	sg := serveInProcess(t, e.config("example.com", "inject.example.com"), e.args()...)
	c := e.client(sg)
	defer c.CloseIdleConnections()
	masked := "[redacted]" + strings.Repeat("*", len("Bearer "+e.token)-len("[redacted]"))
	if code, body := get(t, c, e.url("inject.example.com", "/")); code != 200 || body != "inject.example.com:"+e.port+" "+masked {
		t.Fatalf("injected: %d %q", code, body)
	}
	if code, _ := get(t, c, e.url("denied.example.org", "/")); code != 0 {
		t.Fatalf("denied host got %d", code)
	}
	if code, _ := get(t, c, e.url("example.com", "/")); code != 200 {
		t.Fatalf("tunnel: %d", code)
	}
	c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	var metrics string
	for {
		_, metrics = sg.admin(t, "GET", "/metrics")
		// The allowed tunnel's line is written when the tunnel closes,
		// just after the client let it go.
		if strings.Contains(metrics, `entry="example.com",mode="tunnel",verdict="allow"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{
		`hookgate_requests_total{code="",entry="inject.example.com",mode="mitm",verdict="allow"} 1`,
		`hookgate_requests_total{code="blocked-by-allowlist",entry="",mode="tunnel",verdict="deny"} 1`,
		`hookgate_requests_total{code="",entry="example.com",mode="tunnel",verdict="allow"} 1`,
		`hookgate_injections_total{entry="inject.example.com"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	_, cfg := sg.admin(t, "GET", "/v1/config")
	if !strings.Contains(cfg, `"Authorization":"Bearer ${env:HG_OPS_TOKEN}"`) {
		t.Errorf("/v1/config does not show the reference: %s", cfg)
	}
	_, decisions := sg.admin(t, "GET", "/v1/decisions?limit=10")
	if !strings.Contains(decisions, `"code":"blocked-by-allowlist"`) || !strings.Contains(decisions, `"injected":["Authorization"]`) {
		t.Errorf("/v1/decisions: %s", decisions)
	}
	for name, text := range map[string]string{"/metrics": metrics, "/v1/config": cfg, "/v1/decisions": decisions, "log": sg.logs.String()} {
		if strings.Contains(text, e.token) {
			t.Errorf("the secret appears in %s", name)
		}
	}
}

// TestShutdownCompletesInFlight: on SIGTERM (the context run gets), a
// request in flight and an open tunnel's exchange complete; serve returns
// nil within the grace period and leaves no goroutine behind.
func TestShutdownCompletesInFlight(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := newOpsEnv(t)
	sg := serveInProcess(t, e.config("example.com"), e.args()...)
	c := e.client(sg)
	results := make(chan string, 2)
	for i := 0; i < 2; i++ {
		go func() {
			code, body := get(t, c, e.url("example.com", "/slow"))
			results <- fmt.Sprintf("%d %s", code, body)
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case <-e.slowArrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 requests reached the upstream", i)
		}
	}
	start := time.Now()
	sg.stop()
	// Both requests are in flight when the shutdown begins; only then may
	// the upstream answer them.
	sg.logs.Wait(t, 10*time.Second, func(s string) bool { return strings.Contains(s, `"message":"shutting down`) })
	close(e.releaseSlow)
	for i := 0; i < 2; i++ {
		if got := <-results; !strings.HasPrefix(got, "200 ") {
			t.Errorf("in-flight request during shutdown: %s", got)
		}
	}
	c.CloseIdleConnections()
	select {
	case err := <-sg.done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
		sg.done <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return within the grace period")
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	e.up.Close()
	// The test's own DNS server stops in a cleanup, after this check.
	goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/miekg/dns.(*Server).serveUDP"))
}
