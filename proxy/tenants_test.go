package proxy

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// Canary secrets of the tenant tests: the tokens the gateway injects and
// the credentials clients present. None may appear in a log line, an
// answer or anything the upstream receives unless it is that tenant's own
// injected token.
const (
	tokenA     = "hg-canary-tenant-a-token-3f9c1d"
	tokenB     = "hg-canary-tenant-b-token-8e2a7b"
	passA      = "hg-canary-pass-a-71c0e4"
	bearerB    = "hg-canary-bearer-b-0d5f93"
	passUnicde = "pässwörd:with:colons-hg-canary-9a1b"
)

var tenantEnv = map[string]string{
	"TOKEN_A": tokenA, "TOKEN_B": tokenB, "PASS_A": passA, "BEARER_B": bearerB, "PASS_U": passUnicde,
}

// tenantYAML is a gateway with two tenants sharing api.example.com, each
// with its own token for it and a host of its own; the top-level allowlist
// allows api.example.com with no token, which auth.required keeps anyone
// unidentified from using.
const tenantYAML = `
ca: {cert_file: ca.pem, key_file: ca.key}
auth: {required: %s}
network:
  allowlist:
    - domain: api.example.com
tenants:
  - name: team-a
    proxy_auth:
      - {type: basic, user: team-a, password: "${env:PASS_A}"}
      - {type: basic, user: "sändbox-ü", password: "${env:PASS_U}"}
    clients: [127.0.0.2/32]
    network:
      allowlist:
        - domain: api.example.com
          allow_plaintext: true
          transform: {Authorization: "Bearer ${env:TOKEN_A}"}
        - domain: a-only.example.com
  - name: team-b
    proxy_auth:
      - {type: bearer, token: "${env:BEARER_B}"}
    clients: [127.0.0.3/32]
    network:
      allowlist:
        - domain: api.example.com
          allow_plaintext: true
          transform: {Authorization: "Bearer ${env:TOKEN_B}"}
        - domain: b-only.example.com
`

// tenantPolicy compiles tenantYAML with the upstreams exempt from the
// address policy.
func tenantPolicy(t testing.TB, required bool, exempt ...string) *config.Policy {
	t.Helper()
	return tenantPolicyText(t, fmt.Sprintf(tenantYAML, fmt.Sprint(required)), exempt...)
}

// tenantPolicyText compiles a config with the tenant tests' secrets.
func tenantPolicyText(t testing.TB, text string, exempt ...string) *config.Policy {
	t.Helper()
	c, err := config.Parse("tenants.yaml", []byte(text), config.Options{Transform: transform.Options{
		Dir:       t.TempDir(),
		LookupEnv: func(name string) (string, bool) { v, ok := tenantEnv[name]; return v, ok },
	}})
	if err != nil {
		t.Fatal(err)
	}
	var o config.PolicyOptions
	for _, e := range exempt {
		o.Exempt = append(o.Exempt, netip.MustParseAddrPort(e))
	}
	p, err := c.Policy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tenantEnvGW is a gateway with tenantYAML's tenants, a TLS upstream and a
// plain one, both answering for every example.com name.
type tenantEnvGW struct {
	gw    *gateway
	tlsUp *upstream
	plain *upstream
	pool  *tls.Config // trusts the gateway's CA
}

func newTenantGateway(t *testing.T, required bool) *tenantEnvGW {
	t.Helper()
	return newTenantGatewayText(t, fmt.Sprintf(tenantYAML, fmt.Sprint(required)))
}

// newTenantGatewayText is newTenantGateway with a config of its own, and
// optionally the TLS upstream's handler.
func newTenantGatewayText(t *testing.T, text string, tlsHandler ...http.HandlerFunc) *tenantEnvGW {
	t.Helper()
	authority, pool := newCA(t)
	var h http.HandlerFunc
	if len(tlsHandler) > 0 {
		h = tlsHandler[0]
	}
	tlsUp := newUpstream(t, true, h)
	plain := newUpstream(t, false, nil)
	names := map[string][]string{}
	for _, n := range []string{"api.example.com", "a-only.example.com", "b-only.example.com"} {
		names[n] = []string{"127.0.0.1"}
	}
	gw := startGateway(t, gatewayConfig{
		policy: tenantPolicyText(t, text, tlsUp.hostPort(), plain.hostPort()),
		names:  names,
		roots:  tlsUp.Server,
		leaves: ca.NewLeafCache(authority, 16),
		exempt: []string{tlsUp.hostPort(), plain.hostPort()},
		allow:  []string{"unused.example.com"},
	})
	return &tenantEnvGW{gw: gw, tlsUp: tlsUp, plain: plain, pool: &tls.Config{RootCAs: pool}}
}

// clientAs is an HTTPS client through the gateway with proxy credentials
// in its proxy URL (nil: none), as curl, Python or Go take them from
// HTTPS_PROXY=http://user:pass@gateway.
func (e *tenantEnvGW) clientAs(t *testing.T, user *url.Userinfo, header string) *http.Client {
	t.Helper()
	proxyURL := &url.URL{Scheme: "http", Host: e.gw.addr, User: user}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: e.pool.Clone(), DisableKeepAlives: true}
	if header != "" {
		tr.ProxyConnectHeader = http.Header{"Proxy-Authorization": {header}}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (e *tenantEnvGW) get(t *testing.T, c *http.Client, rawURL string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(rawURL)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func basicHeader(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// lastAuth is the Authorization header of the upstream's last request, and
// whether any Proxy-Authorization reached it.
func lastAuth(t *testing.T, u *upstream) string {
	t.Helper()
	reqs := u.requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream got no request")
	}
	for _, r := range reqs {
		if _, ok := r.Header["Proxy-Authorization"]; ok {
			t.Fatal("Proxy-Authorization reached the upstream")
		}
	}
	return reqs[len(reqs)-1].Header.Get("Authorization")
}

func TestTenantsGetOnlyTheirOwnToken(t *testing.T) {
	e := newTenantGateway(t, true)
	tlsURL := "https://api.example.com:" + e.tlsUp.port() + "/"

	a := e.clientAs(t, url.UserPassword("team-a", passA), "")
	if resp, _ := e.get(t, a, tlsURL); resp.StatusCode != 200 {
		t.Fatalf("team-a: status %d", resp.StatusCode)
	}
	if got := lastAuth(t, e.tlsUp); got != "Bearer "+tokenA {
		t.Fatal("team-a's request did not carry team-a's token (and only it)")
	}
	b := e.clientAs(t, nil, "Bearer "+bearerB)
	if resp, _ := e.get(t, b, tlsURL); resp.StatusCode != 200 {
		t.Fatalf("team-b: status %d", resp.StatusCode)
	}
	if got := lastAuth(t, e.tlsUp); got != "Bearer "+tokenB {
		t.Fatal("team-b's request did not carry team-b's token (and only it)")
	}

	// Each tenant's allowlist is its own.
	if _, err := a.Get("https://b-only.example.com:" + e.tlsUp.port() + "/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("team-a reaching team-b's host: %v, want a 403", err)
	}

	// Unidentified: 407, and nothing upstream (not even a lookup).
	before := len(e.tlsUp.requests())
	lookups := len(e.gw.resolver.lookups)
	_, err := e.clientAs(t, nil, "").Get(tlsURL)
	if err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
		t.Fatalf("unidentified client: err = %v, want a 407", err)
	}
	if len(e.tlsUp.requests()) != before || len(e.gw.resolver.lookups) != lookups {
		t.Fatal("an unidentified client's request reached the upstream side")
	}

	lines := e.gw.logs.waitDecisions(t, 4)
	wantTenants := []string{"team-a", "team-b", "team-a", ""}
	for i, l := range lines {
		got, _ := l["tenant"].(string)
		if got != wantTenants[i] {
			t.Errorf("line %d: tenant %q, want %q (%v)", i, got, wantTenants[i], l)
		}
	}
	if lines[3]["code"] != string(CodeProxyAuthRequired) || lines[3]["status"] != float64(407) {
		t.Errorf("unidentified line = %v", lines[3])
	}
	assertNoTenantSecrets(t, "the log", e.gw.logs.String())
}

// TestTenantsOneKeepAliveConnection sends absolute-form requests of both
// tenants, in turn, on one client connection: each carries its own token,
// whatever the one before it was.
func TestTenantsOneKeepAliveConnection(t *testing.T) {
	e := newTenantGateway(t, true)
	c, err := net.DialTimeout("tcp", e.gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	creds := []struct{ header, want string }{
		{basicHeader("team-a", passA), tokenA},
		{"Bearer " + bearerB, tokenB},
		{basicHeader("team-a", passA), tokenA},
		{"bearer   " + bearerB, tokenB},
	}
	for i, cr := range creds {
		fmt.Fprintf(c, "GET http://api.example.com:%s/%d HTTP/1.1\r\nHost: api.example.com\r\nProxy-Authorization: %s\r\n\r\n", e.plain.port(), i, cr.header)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if got := lastAuth(t, e.plain); got != "Bearer "+cr.want {
			t.Fatalf("request %d carried another tenant's token", i)
		}
	}
	// The same connection, no credentials: 407, nothing upstream.
	fmt.Fprintf(c, "GET http://api.example.com:%s/none HTTP/1.1\r\nHost: api.example.com\r\n\r\n", e.plain.port())
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get(HeaderProxyError) != string(CodeProxyAuthRequired) {
		t.Fatalf("no credentials: %d %v", resp.StatusCode, resp.Header)
	}
	if len(resp.Header.Values("Proxy-Authenticate")) != 2 {
		t.Fatalf("Proxy-Authenticate = %q", resp.Header.Values("Proxy-Authenticate"))
	}
	if n := len(e.plain.requests()); n != len(creds) {
		t.Fatalf("the upstream got %d requests, want %d", n, len(creds))
	}
	assertNoTenantSecrets(t, "the log", e.gw.logs.String())
}

// TestProxyAuthCases covers the ways a client presents (or fails to
// present) credentials, on a CONNECT and on an absolute-form request.
func TestProxyAuthCases(t *testing.T) {
	e := newTenantGateway(t, true)
	cases := []struct {
		name   string
		header string // "" for none
		want   int
		tenant string
	}{
		{"basic", basicHeader("team-a", passA), 200, "team-a"},
		{"basic scheme in lower case", "basic " + base64.StdEncoding.EncodeToString([]byte("team-a:"+passA)), 200, "team-a"},
		{"unicode user, password with colons", basicHeader("sändbox-ü", passUnicde), 200, "team-a"},
		{"bearer", "Bearer " + bearerB, 200, "team-b"},
		{"wrong password", basicHeader("team-a", passA+"x"), 407, ""},
		{"unknown user", basicHeader("team-z", passA), 407, ""},
		{"user with a colon (splits at the first)", basicHeader("team-a:x", passA), 407, ""},
		{"bearer token sent as basic", basicHeader("team-b", bearerB), 407, ""},
		{"basic password sent as bearer", "Bearer " + passA, 407, ""},
		{"missing header", "", 407, ""},
		{"empty password", basicHeader("team-a", ""), 407, ""},
		{"not base64", "Basic %%%", 407, ""},
		{"unknown scheme", "Digest username=\"team-a\"", 407, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, connect := range []bool{true, false} {
				status := e.viaProxy(t, connect, tc.header)
				if status != tc.want {
					t.Fatalf("connect=%v: status %d, want %d", connect, status, tc.want)
				}
			}
		})
		// Failed attempts count against the address: start afresh.
		e.gw.srv.authFailures = authLimiter{}
	}
	assertNoTenantSecrets(t, "the log", e.gw.logs.String())
}

// viaProxy sends one request with a Proxy-Authorization header (none for
// ""): a CONNECT (then a request in the tunnel) or an absolute-form
// request. It returns the status the client ends up with.
func (e *tenantEnvGW) viaProxy(t *testing.T, connect bool, header string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	auth := ""
	if header != "" {
		auth = "Proxy-Authorization: " + header + "\r\n"
	}
	br := bufio.NewReader(c)
	if !connect {
		fmt.Fprintf(c, "GET http://api.example.com:%s/ HTTP/1.1\r\nHost: api.example.com\r\n%sConnection: close\r\n\r\n", e.plain.port(), auth)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Fprintf(c, "CONNECT api.example.com:%s HTTP/1.1\r\nHost: api.example.com:%s\r\n%s\r\n", e.tlsUp.port(), e.tlsUp.port(), auth)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return resp.StatusCode
	}
	cfg := e.pool.Clone()
	cfg.ServerName = "api.example.com"
	tc := tls.Client(c, cfg)
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.example.com:%s\r\nConnection: close\r\n\r\n", e.tlsUp.port())
	inner, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	inner.Body.Close()
	return inner.StatusCode
}

func TestProxyAuthFailuresRateLimited(t *testing.T) {
	e := newTenantGateway(t, true)
	for i := 0; i < authBurst; i++ {
		if got := e.viaProxy(t, false, basicHeader("team-a", "guess")); got != 407 {
			t.Fatalf("attempt %d: status %d", i, got)
		}
	}
	// Out of attempts: even the right password waits.
	if got := e.viaProxy(t, false, basicHeader("team-a", passA)); got != http.StatusTooManyRequests {
		t.Fatalf("after %d failures: status %d, want 429", authBurst, got)
	}
	// A client that sends none is not held back by the failures of others
	// at its address: it is simply unidentified.
	if got := e.viaProxy(t, false, ""); got != 407 {
		t.Fatalf("no credentials: status %d", got)
	}
	lines := e.gw.logs.decisions(t)
	if last := lines[authBurst]; last["code"] != string(CodeProxyAuthRateLimited) {
		t.Fatalf("rate-limited line = %v", last)
	}
}

// TestAuthLimiterRefills checks the failure budget refills with time and
// the table of addresses stays bounded.
func TestAuthLimiterRefills(t *testing.T) {
	var l authLimiter
	a := netip.MustParseAddr("192.0.2.1")
	now := time.Unix(1000, 0)
	for i := 0; i < authBurst; i++ {
		l.fail(a, now)
	}
	if l.allowed(a, now) {
		t.Fatal("allowed after the burst")
	}
	if !l.allowed(a, now.Add(authRefill)) {
		t.Fatal("not allowed after one refill period")
	}
	for i := 0; i < maxAuthClients+10; i++ {
		b := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		l.fail(b, now)
	}
	if len(l.m) > maxAuthClients {
		t.Fatalf("the limiter remembers %d addresses, more than %d", len(l.m), maxAuthClients)
	}
}

// TestProxyAuthorizationNeverForwarded: with or without tenants, the
// header is for the gateway alone.
func TestProxyAuthorizationNeverForwarded(t *testing.T) {
	plain := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{allow: []string{"plain.test"}, exempt: []string{plain.hostPort()},
		names: map[string][]string{"plain.test": {"127.0.0.1"}}})
	out := gw.raw(t, "GET http://plain.test:"+plain.port()+"/ HTTP/1.1\r\nHost: plain.test\r\nProxy-Authorization: "+basicHeader("x", passA)+"\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 200 ") {
		t.Fatalf("answer:\n%s", out)
	}
	if reqs := plain.requests(); len(reqs) != 1 || reqs[0].Header.Get("Proxy-Authorization") != "" {
		t.Fatal("Proxy-Authorization reached the upstream")
	}
}

// TestTenantsNotRequired: without auth.required an unidentified client
// gets the top-level policy (no token), a wrong credential still 407.
func TestTenantsNotRequired(t *testing.T) {
	e := newTenantGateway(t, false)
	if got := e.viaProxy(t, false, ""); got != 200 {
		t.Fatalf("unidentified: status %d", got)
	}
	if got := lastAuth(t, e.plain); got != "" {
		t.Fatal("an unidentified client's request got a tenant's token")
	}
	if got := e.viaProxy(t, false, basicHeader("team-a", "wrong")); got != 407 {
		t.Fatalf("wrong credentials: status %d", got)
	}
}

// TestTransparentTenantsBySource: in transparent mode the source address
// selects the tenant; an address no tenant claims gets blocked-by-allowlist.
func TestTransparentTenantsBySource(t *testing.T) {
	e := newTenantGateway(t, true)
	e.gw.srv.origDst = func(net.Conn) (netip.AddrPort, error) { return netip.MustParseAddrPort(e.plain.hostPort()), nil }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.gw.srv.ServeTransparent(ln) }()
	from := func(src string) string {
		t.Helper()
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Status + " " + resp.Header.Get(HeaderProxyError)
	}
	if got := from("127.0.0.2"); !strings.HasPrefix(got, "200") || lastAuth(t, e.plain) != "Bearer "+tokenA {
		t.Fatalf("127.0.0.2 (team-a): %s", got)
	}
	if got := from("127.0.0.3"); !strings.HasPrefix(got, "200") || lastAuth(t, e.plain) != "Bearer "+tokenB {
		t.Fatalf("127.0.0.3 (team-b): %s", got)
	}
	n := len(e.plain.requests())
	if got := from("127.0.0.4"); !strings.HasPrefix(got, "403") || !strings.Contains(got, string(CodeAllowlist)) {
		t.Fatalf("127.0.0.4 (no tenant): %s", got)
	}
	if len(e.plain.requests()) != n {
		t.Fatal("a client of no tenant reached the upstream")
	}
	lines := e.gw.logs.waitDecisions(t, 3)
	if lines[0]["tenant"] != "team-a" || lines[1]["tenant"] != "team-b" || lines[2]["tenant"] != nil {
		t.Fatalf("tenants on the lines: %v %v %v", lines[0]["tenant"], lines[1]["tenant"], lines[2]["tenant"])
	}
}

// TestReloadSwapsTenants: a tunnel opened before a reload keeps its
// tenant's policy; after it, the removed tenant's new requests get 407.
func TestReloadSwapsTenants(t *testing.T) {
	e := newTenantGateway(t, true)
	// An open keep-alive tunnel of team-b.
	b := e.clientAs(t, nil, "Bearer "+bearerB)
	b.Transport.(*http.Transport).DisableKeepAlives = false
	tlsURL := "https://api.example.com:" + e.tlsUp.port() + "/"
	if resp, _ := e.get(t, b, tlsURL); resp.StatusCode != 200 {
		t.Fatalf("team-b: %d", resp.StatusCode)
	}
	// Reload without team-b: a generation of team-a alone.
	only := withoutTenant(t, "team-b", e.tlsUp.hostPort(), e.plain.hostPort())
	if err := e.gw.srv.SetPolicy(only); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.get(t, b, tlsURL); resp.StatusCode != 200 || lastAuth(t, e.tlsUp) != "Bearer "+tokenB {
		t.Fatal("the open tunnel lost the policy it was admitted with")
	}
	if got := e.viaProxy(t, false, "Bearer "+bearerB); got != 407 {
		t.Fatalf("the removed tenant's new request: status %d, want 407", got)
	}
	if got := e.viaProxy(t, false, basicHeader("team-a", passA)); got != 200 {
		t.Fatalf("team-a after the reload: status %d", got)
	}
}

// withoutTenant recompiles tenantYAML without one tenant.
func withoutTenant(t *testing.T, name string, exempt ...string) *config.Policy {
	t.Helper()
	text := fmt.Sprintf(tenantYAML, "true")
	i := strings.Index(text, "  - name: "+name)
	p := tenantPolicyText(t, text[:i], exempt...)
	if _, ok := p.Tenants.ByName(name); ok {
		t.Fatalf("%s is still there", name)
	}
	return p
}

// assertNoTenantSecrets fails if text holds any tenant secret, in clear,
// base64 (a Basic header) or as its SHA-256.
func assertNoTenantSecrets(t *testing.T, where, text string) {
	t.Helper()
	for name, v := range tenantEnv {
		sum := sha256.Sum256([]byte(v))
		for form, s := range map[string]string{
			"clear":  v,
			"sha256": hex.EncodeToString(sum[:]),
			"basic":  base64.StdEncoding.EncodeToString([]byte("team-a:" + v)),
		} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %s in %s form", where, name, form)
			}
		}
	}
}

func BenchmarkIdentify(b *testing.B) {
	p := tenantPolicy(b, true)
	s := &Server{}
	s.policy.Store(p)
	for _, bc := range []struct{ name, header string }{
		{"basic", basicHeader("team-a", passA)},
		{"bearer", "Bearer " + bearerB},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, _ := http.NewRequest(http.MethodGet, "http://api.example.com/", nil)
			r.RemoteAddr = "192.0.2.7:40000"
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r.Header.Set("Proxy-Authorization", bc.header)
				if id, den := s.identify(r); den != nil || id.tenant == "" {
					b.Fatal("not identified")
				}
			}
		})
	}
}

// parseErrors are the only errors the parser returns: fixed texts, which
// cannot quote a client's credentials.
var parseErrors = []error{errAuthTooLong, errAuthNoScheme, errAuthScheme, errAuthBase64, errAuthNoColon, errAuthEmpty, errAuthControl, errAuthBadToken68}

func FuzzParseProxyAuthorization(f *testing.F) {
	for _, s := range []string{
		basicHeader("team-a", passA), "Bearer abc.def~+/==", "basic Og==", "Basic", "Bearer ",
		"Basic " + base64.RawStdEncoding.EncodeToString([]byte("u:p")), "Bearer a=b", " Basic  dTpw ",
		"Basic " + base64.StdEncoding.EncodeToString([]byte("u\x00:p")),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		cred, err := parseProxyAuthorization(v)
		if err != nil {
			if cred != (proxyCredential{}) {
				t.Fatal("a failed parse returned a credential")
			}
			if !slices.Contains(parseErrors, err) {
				t.Fatal("the error is not one of the fixed ones (it may quote the header)")
			}
			return
		}
		switch cred.scheme {
		case config.CredentialBasic:
			if cred.user == "" || cred.secret == "" || strings.Contains(cred.user, ":") || hasControl(cred.user+cred.secret) {
				t.Fatalf("bad basic credential accepted")
			}
			again, err := parseProxyAuthorization(basicHeader(cred.user, cred.secret))
			if err != nil || again != cred {
				t.Fatal("a basic credential does not round-trip")
			}
		case config.CredentialBearer:
			if !isToken68(cred.secret) {
				t.Fatal("a bearer token that is no token68 was accepted")
			}
		default:
			t.Fatalf("scheme %q", cred.scheme)
		}
	})
}

// TestTenantSecretsRedacted: the log's and the admin API's scrubber knows
// every tenant's injected secrets, not only the top-level ones.
func TestTenantSecretsRedacted(t *testing.T) {
	e := newTenantGateway(t, true)
	for _, secret := range []string{tokenA, tokenB} {
		e.gw.srv.stdLogger().Printf("upstream said %q", "Bearer "+secret)
		if got := e.gw.srv.Redact("echo: " + secret); strings.Contains(got, secret) {
			t.Fatal("Redact let a tenant's secret through")
		}
	}
	if logs := e.gw.logs.String(); strings.Contains(logs, tokenA) || strings.Contains(logs, tokenB) || !strings.Contains(logs, "[redacted]") {
		t.Fatal("the log holds a tenant's secret, or nothing was redacted")
	}
}

// BenchmarkForwardProxyAuth is BenchmarkForward with every request
// authenticated (Basic) and judged by its tenant's policy: compare the two
// for the cost of proxy_auth on the request path.
func BenchmarkForwardProxyAuth(b *testing.B) {
	up := newUpstream(b, false, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1024))
	})
	p := tenantPolicyText(b, `auth: {required: true}
tenants:
  - name: bench
    proxy_auth: [{type: basic, user: bench, password: "${env:PASS_A}"}]
    network:
      allowlist: [{domain: "*"}]
`, up.hostPort())
	gw := startGateway(b, gatewayConfig{policy: p, allow: []string{"unused.example.com"}})
	benchForward(b, &url.URL{Scheme: "http", Host: gw.addr, User: url.UserPassword("bench", passA)}, up.URL)
}
