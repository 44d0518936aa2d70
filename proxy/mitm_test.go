package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// canary is the secret the MITM tests inject: distinctive, so that finding
// it anywhere it must not be is unambiguous.
const canary = "hg-canary-5d1e8b7c2f-do-not-leak"

// maskedAuth is how an echo of the injected "Bearer <canary>" reaches the
// client in a body: a mask of the same length.
var maskedAuth = "[redacted]" + strings.Repeat("*", len("Bearer "+canary)-len("[redacted]"))

// mitmEnv is a gateway with one transform entry (telemetry.example.com),
// a plain entry for the rest of example.com, our CA, and a TLS upstream that
// serves every example.com name.
type mitmEnv struct {
	gw       *gateway
	up       *upstream
	caPool   *x509.CertPool // trusts only our CA
	upstream string         // the upstream's port
}

func newCA(t testing.TB) (*ca.CA, *x509.CertPool) {
	t.Helper()
	certPath, keyPath, err := ca.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	authority, err := ca.Load(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(authority.CertPEM()) {
		t.Fatal("the CA's PEM holds no certificate")
	}
	return authority, pool
}

func compileRules(t testing.TB, headers map[string]string) *transform.Rules {
	t.Helper()
	var specs []transform.HeaderSpec
	for k, v := range headers {
		specs = append(specs, transform.HeaderSpec{Name: k, Value: v})
	}
	r, err := transform.Compile(specs, transform.Options{LookupEnv: func(name string) (string, bool) {
		return canary, name == "CANARY"
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newMITMEnv(t testing.TB, handler http.HandlerFunc, mutate func(*gatewayConfig)) *mitmEnv {
	t.Helper()
	authority, pool := newCA(t)
	up := newUpstream(t, true, handler)
	gc := gatewayConfig{
		allow:  []string{"telemetry.example.com", "*.example.com"},
		exempt: []string{up.hostPort()},
		names: map[string][]string{
			"telemetry.example.com": {"127.0.0.1"},
			"other.example.com":     {"127.0.0.1"},
		},
		roots:   up.Server,
		entries: []config.Entry{{Transform: compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"})}},
		leaves:  ca.NewLeafCache(authority, 16),
	}
	if mutate != nil {
		mutate(&gc)
	}
	return &mitmEnv{gw: startGateway(t, gc), up: up, caPool: pool, upstream: up.port()}
}

// client trusts our CA for intercepted hosts and the upstream's own
// certificate for tunnelled ones — what a sandbox's trust store holds.
func (e *mitmEnv) client(t *testing.T) *http.Client {
	t.Helper()
	pool := e.caPool.Clone()
	pool.AddCert(e.up.Certificate())
	proxyURL, _ := url.Parse("http://" + e.gw.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (e *mitmEnv) url(host, path string) string {
	return "https://" + host + ":" + e.upstream + path
}

// echoAuth answers with the Authorization header the upstream received.
func echoAuth(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "%s|%d", r.Header.Get("Authorization"), len(r.Header.Values("Authorization")))
}

// assertNoCanary fails if the canary appears in the gateway's logs.
func (e *mitmEnv) assertNoCanary(t *testing.T) {
	t.Helper()
	if strings.Contains(e.gw.logs.String(), canary) {
		t.Fatalf("the secret appears in the gateway's log:\n%s", hideCanary(e.gw.logs.String()))
	}
}

// TestMITMReferenceScenario: a client that trusts only our CA POSTs JSON to
// the telemetry host; the upstream receives the bearer token, the client
// never sees it.
func TestMITMReferenceScenario(t *testing.T) {
	var gotAuth, gotBody string
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}, nil)
	proxyURL, _ := url.Parse("http://" + env.gw.addr)
	onlyOurCA := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: env.caPool}}}
	defer onlyOurCA.CloseIdleConnections()
	event := `{"tool_call":{"name":"read_file","args":{"path":"/x"}},"environment_id":"env_1"}`
	resp, err := onlyOurCA.Post(env.url("telemetry.example.com", "/api/v1/agent-events"), "application/json", strings.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"ok":true}` {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if gotAuth != "Bearer "+canary || gotBody != event {
		t.Fatalf("upstream got Authorization %q, body %q", gotAuth, gotBody)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Issuer.CommonName == env.up.Certificate().Subject.CommonName {
		t.Fatal("the client was not served our leaf certificate")
	}
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if d["mode"] != "mitm" || d["upstream"] != "127.0.0.1:"+env.upstream || d["entry"] != "telemetry.example.com" || fmt.Sprint(d["injected"]) != "[Authorization]" || d["status"] != 200.0 {
		t.Fatalf("decision = %v", d)
	}
	env.assertNoCanary(t)
}

func TestMITMReplacesClientCopies(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	req, _ := http.NewRequest("GET", env.url("telemetry.example.com", "/"), nil)
	req.Header["Authorization"] = []string{"Bearer sandbox-own", "Bearer second"}
	req.Header["authorization"] = []string{"odd-case"}
	req.Header["AUTHORIZATION"] = []string{"upper"}
	req.Header.Set("Proxy-Authorization", "Basic c2FuZGJveA==")
	resp, err := env.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The echo is scrubbed on the way back (the whole injected value is a
	// secret), and exactly one value arrived.
	if string(body) != maskedAuth+"|1" || got0(env).Header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("upstream saw %q, want exactly one injected Authorization", body)
	}
	if got0(env).Header.Get("Proxy-Authorization") != "" {
		t.Fatal("Proxy-Authorization reached the upstream")
	}
	env.assertNoCanary(t)
}

func got0(env *mitmEnv) *http.Request { return env.up.requests()[0] }

func TestMITMNotMatchedHostIsTunnelled(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	c := env.client(t)
	resp, err := c.Get(env.url("other.example.com", "/"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections() // the tunnel's line is written when it closes
	if string(body) != "|0" {
		t.Fatalf("a host without a transform got %q", body)
	}
	if resp.TLS.PeerCertificates[0].Subject.CommonName != env.up.Certificate().Subject.CommonName {
		t.Fatal("a host without a transform was intercepted instead of tunnelled")
	}
	if d := env.gw.logs.waitDecisions(t, 1)[0]; d["mode"] != "tunnel" || d["injected"] != nil {
		t.Fatalf("decision = %v", d)
	}
}

// TestMITMRedirectIsNotFollowed: a 3xx goes back to the client; following it
// is a new request judged on its own host, which gets no credential.
func TestMITMRedirectIsNotFollowed(t *testing.T) {
	var env *mitmEnv
	env = newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "telemetry.example.com:"+env.upstream {
			http.Redirect(w, r, env.url("other.example.com", "/landing"), http.StatusFound)
			return
		}
		echoAuth(w, r)
	}, nil)
	c := env.client(t)
	resp, err := c.Get(env.url("telemetry.example.com", "/start"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want the 302 passed back", resp.StatusCode)
	}
	if n := len(env.up.requests()); n != 1 {
		t.Fatalf("the gateway followed the redirect: upstream saw %d requests", n)
	}
	resp, err = c.Get(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "|0" {
		t.Fatalf("the redirect target got %q", body)
	}
}

func TestMITMHostMismatch(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	c := env.client(t)
	cases := map[string]func(*http.Request){
		"inner Host":        func(r *http.Request) { r.Host = "other.example.com:" + env.upstream },
		"inner Host port":   func(r *http.Request) { r.Host = "telemetry.example.com:1" },
		"absolute-form URL": nil, // sent raw below
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			if mutate == nil {
				return
			}
			req, _ := http.NewRequest("GET", env.url("telemetry.example.com", "/"), nil)
			mutate(req)
			// The Go client opens the tunnel to the URL's host but sends
			// req.Host inside it.
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			denialOf(t, resp, http.StatusForbidden, CodeHostMismatch)
		})
	}
	t.Run("absolute-form URL", func(t *testing.T) {
		conn, resp := connect(t, env.gw, "telemetry.example.com:"+env.upstream)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		tc := tls.Client(conn, &tls.Config{RootCAs: env.caPool, ServerName: "telemetry.example.com"})
		fmt.Fprintf(tc, "GET https://other.example.com:%s/ HTTP/1.1\r\nHost: telemetry.example.com:%s\r\nConnection: close\r\n\r\n", env.upstream, env.upstream)
		resp, err := http.ReadResponse(bufioReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		denialOf(t, resp, http.StatusForbidden, CodeHostMismatch)
	})
	if n := len(env.up.requests()); n != 0 {
		t.Fatalf("upstream received %d requests for mismatched hosts", n)
	}
	env.assertNoCanary(t)
}

func TestMITMUntrustedUpstream(t *testing.T) {
	_, otherPool := newCA(t) // the gateway trusts an unrelated CA only
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) { gc.roots, gc.rootPool = nil, otherPool })
	resp, err := env.client(t).Get(env.url("telemetry.example.com", "/"))
	if err != nil {
		t.Fatal(err)
	}
	denialOf(t, resp, http.StatusBadGateway, CodeUpstreamTLS)
	if n := len(env.up.requests()); n != 0 {
		t.Fatalf("the request reached an unverified upstream (%d)", n)
	}
	env.assertNoCanary(t)
}

func TestMITMScrubsEchoes(t *testing.T) {
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Echo", auth)
		w.Header().Set("Content-Length", fmt.Sprint(len(auth)*4+2))
		_, _ = io.WriteString(w, auth+"\n"+strings.Repeat("x", len(auth))+auth+"\n"+auth)
	}, nil)
	resp, err := env.client(t).Get(env.url("telemetry.example.com", "/"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), canary) || strings.Contains(resp.Header.Get("X-Echo"), canary) {
		t.Fatalf("the secret reached the client: header %q body %q", resp.Header.Get("X-Echo"), body)
	}
	if resp.Header.Get("X-Echo") != "[redacted]" || strings.Count(string(body), maskedAuth) != 3 || resp.ContentLength != int64(len(body)) {
		t.Fatalf("echo not scrubbed as expected: header %q body %q", resp.Header.Get("X-Echo"), body)
	}
}

func TestPlaintextToTransformHost(t *testing.T) {
	plain := newUpstream(t, false, echoAuth)
	authority, _ := newCA(t)
	rules := compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"})
	gw := startGateway(t, gatewayConfig{
		allow:   []string{"telemetry.example.com", "open.example.com"},
		exempt:  []string{plain.hostPort()},
		names:   map[string][]string{"telemetry.example.com": {"127.0.0.1"}, "open.example.com": {"127.0.0.1"}},
		entries: []config.Entry{{Transform: rules}, {Transform: rules, AllowPlaintext: true}},
		leaves:  ca.NewLeafCache(authority, 4),
	})
	c := gw.client(t, nil)
	resp, err := c.Get("http://telemetry.example.com:" + plain.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	denialOf(t, resp, http.StatusForbidden, CodePlaintextCredential)
	if n := len(plain.requests()); n != 0 {
		t.Fatalf("plain request reached the upstream (%d)", n)
	}
	// Opted in: injected, and the echo scrubbed.
	resp, err = c.Get("http://open.example.com:" + plain.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != maskedAuth+"|1" || plain.requests()[0].Header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("allow_plaintext: client got %q", body)
	}
	if strings.Contains(gw.logs.String(), canary) {
		t.Fatal("the secret appears in the log")
	}
}

// TestMITMClientNotTrustingCA: a client without our CA refuses the leaf;
// nothing reaches the upstream and the tunnel's line says why.
func TestMITMClientNotTrustingCA(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	proxyURL, _ := url.Parse("http://" + env.gw.addr)
	upstreamOnly := x509.NewCertPool()
	upstreamOnly.AddCert(env.up.Certificate())
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: upstreamOnly}}}
	if _, err := c.Get(env.url("telemetry.example.com", "/")); err == nil {
		t.Fatal("a client that does not trust our CA accepted the leaf")
	}
	if n := len(env.up.requests()); n != 0 {
		t.Fatalf("upstream received %d requests", n)
	}
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if d["mode"] != "mitm" || d["code"] != string(CodeProtocol) {
		t.Fatalf("decision = %v", d)
	}
}
