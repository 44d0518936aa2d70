package proxy

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// denialOf checks a gateway answer and decodes its JSON body.
func denialOf(t *testing.T, resp *http.Response, status int, code Code) denialBody {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d", resp.StatusCode, status)
	}
	if got := resp.Header.Get(HeaderProxyError); got != string(code) {
		t.Fatalf("%s = %q, want %q", HeaderProxyError, got, code)
	}
	var body denialBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("denial body: %v", err)
	}
	if body.Error != code || body.Reason == "" {
		t.Fatalf("denial body = %+v, want error %q and a reason", body, code)
	}
	return body
}

func TestForwardAllowed(t *testing.T) {
	up := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.Host, b)
	})
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"api.example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"api.example.com": {"127.0.0.1"}},
	})
	req, _ := http.NewRequest("POST", "http://user:pw@API.Example.com.:"+up.port()+"/v1/x?q=1", strings.NewReader("payload"))
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "drop me")
	resp, err := gw.client(t, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "POST api.example.com:" + up.port() + " payload"
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	got := up.requests()[0]
	for _, h := range []string{"Proxy-Authorization", "X-Hop"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("upstream received %s: %q", h, v)
		}
	}
	if got.URL.String() != "/v1/x?q=1" {
		t.Errorf("upstream path = %q", got.URL)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	for k, v := range map[string]any{"mode": "http", "verdict": "allow", "upstream": up.hostPort(), "host": "api.example.com", "entry": "api.example.com", "status": 200.0, "bytes_in": 7.0} {
		if d[k] != v {
			t.Errorf("decision %s = %v, want %v", k, d[k], v)
		}
	}
}

// TestRoutingIgnoresHostHeader: the request target routes, never the Host
// header, and the upstream sees Host = the target authority.
func TestRoutingIgnoresHostHeader(t *testing.T) {
	up := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Host+r.Header.Get("Authorization")) })
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"api.example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"api.example.com": {"127.0.0.1"}, "evil.example.net": {"127.0.0.1"}},
	})
	// Userinfo is stripped: it must not turn into an Authorization header.
	got := gw.raw(t, "GET http://user:pw@api.example.com:"+up.port()+"/ HTTP/1.1\r\nHost: evil.example.net\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "\r\n\r\napi.example.com:"+up.port()) {
		t.Fatalf("answer:\n%s", got)
	}
	got = gw.raw(t, "GET http://evil.example.net:"+up.port()+"/ HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 403 ") || !strings.Contains(got, "blocked-by-allowlist") {
		t.Fatalf("answer:\n%s", got)
	}
}

func TestForwardDenied(t *testing.T) {
	up := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"*.example.com"},
		exempt: []string{up.hostPort()},
		names: map[string][]string{
			"example.com":       {"127.0.0.1"},
			"other.test":        {"127.0.0.1"},
			"lo.example.com":    {"127.0.0.2"},
			"meta.example.com":  {"169.254.169.254"},
			"mixed.example.com": {"198.51.100.7", "10.1.2.3"},
			"v6.example.com":    {"::ffff:127.0.0.2"},
		},
	})
	c := gw.client(t, nil)
	cases := []struct {
		name, url string
		code      Code
		mention   string // the reason must name this
		resolved  bool   // whether the name may have been looked up
	}{
		{"apex is not a subdomain", "http://example.com:%s/", CodeAllowlist, "example.com", false},
		{"unlisted", "http://other.test:%s/", CodeAllowlist, "not on the allowlist", false},
		{"loopback answer", "http://lo.example.com:%s/", CodeAddressPolicy, "loopback", true},
		{"metadata answer", "http://meta.example.com:%s/", CodeAddressPolicy, "metadata", true},
		{"mixed answer", "http://mixed.example.com:%s/", CodeAddressPolicy, "private", true},
		{"mapped loopback answer", "http://v6.example.com:%s/", CodeAddressPolicy, "loopback", true},
		{"localhost name", "http://localhost:%s/", CodeAllowlist, "localhost", false},
		{"loopback literal", "http://127.0.0.1:%s/", CodeAllowlist, "127.0.0.1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Get(fmt.Sprintf(tc.url, up.port()))
			if err != nil {
				t.Fatal(err)
			}
			body := denialOf(t, resp, http.StatusForbidden, tc.code)
			if !strings.Contains(body.Reason, tc.mention) {
				t.Errorf("reason %q does not mention %q", body.Reason, tc.mention)
			}
			host := strings.Split(strings.TrimPrefix(tc.url, "http://"), ":")[0]
			if !tc.resolved && gw.resolver.looked(host) {
				t.Errorf("%s was resolved although the allowlist denies it", host)
			}
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream received %d requests for denied targets", n)
	}
	gw.logs.waitDecisions(t, len(cases))
}

// closedPort returns a loopback port with nothing listening on it.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

func TestLoopbackAlwaysBlocked(t *testing.T) {
	up := newUpstream(t, false, nil)
	// Even "*" plus a CIDR cannot reach loopback: only the exact exempted
	// address and port pass, however they are spelled.
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"*"},
		exempt: []string{up.hostPort()},
		cidrs:  []string{"10.0.0.0/8"},
		names:  map[string][]string{"rebind.test": {"127.0.0.1"}},
	})
	c := gw.client(t, nil)
	other := closedPort(t)
	for _, tc := range []struct {
		url     string
		allowed bool
	}{
		{"http://127.0.0.1:" + up.port() + "/", true},
		{"http://2130706433:" + up.port() + "/", true},
		{"http://[::ffff:127.0.0.1]:" + up.port() + "/", true},
		{"http://127.0.0.1:" + other + "/", false},
		{"http://127.0.0.2:" + up.port() + "/", false},
		{"http://2130706433:" + other + "/", false},
		{"http://0x7f.1:" + other + "/", false},
		{"http://0177.0.0.1:" + other + "/", false},
		{"http://127.1:" + other + "/", false},
		{"http://[::ffff:127.0.0.1]:" + other + "/", false},
		{"http://[::ffff:7f00:2]:" + up.port() + "/", false},
		{"http://[::1]:" + up.port() + "/", false},
		{"http://[::127.0.0.1]:" + up.port() + "/", false},
		{"http://rebind.test:" + other + "/", false},
		{"http://sub.localhost:" + up.port() + "/", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			resp, err := c.Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.allowed {
				denialOf(t, resp, http.StatusForbidden, CodeAddressPolicy)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("exempt upstream: status %d", resp.StatusCode)
			}
		})
	}
	if n := len(up.requests()); n != 3 {
		t.Fatalf("upstream received %d requests, want only the 3 to the exempt address", n)
	}
}

func TestUpstreamFailures(t *testing.T) {
	slow := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	})
	// A port with nothing listening: bind, note the port, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	gw := startGateway(t, gatewayConfig{
		allow:    []string{"*"},
		exempt:   []string{slow.hostPort(), closed},
		timeouts: Timeouts{ResponseHeader: 200 * time.Millisecond},
	})
	c := gw.client(t, nil)
	resp, err := c.Get(slow.URL)
	if err != nil {
		t.Fatal(err)
	}
	denialOf(t, resp, http.StatusGatewayTimeout, CodeUpstreamTimeout)
	resp, err = c.Get("http://" + closed + "/")
	if err != nil {
		t.Fatal(err)
	}
	denialOf(t, resp, http.StatusBadGateway, CodeUpstreamError)
	resp, err = c.Get("http://no-such-host.test/")
	if err != nil {
		t.Fatal(err)
	}
	if b := denialOf(t, resp, http.StatusBadGateway, CodeUpstreamError); !strings.Contains(b.Reason, "no such host") {
		t.Errorf("reason = %q", b.Reason)
	}
	gw.logs.waitDecisions(t, 3)
}

func TestConnectTunnel(t *testing.T) {
	up := newUpstream(t, true, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"example.com": {"127.0.0.1"}},
	})
	c := gw.client(t, up.Server)
	resp, err := c.Get("https://example.com:" + up.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from upstream" {
		t.Fatalf("body = %q", body)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["mode"] != "tunnel" || d["verdict"] != "allow" || d["sni"] != "example.com" || d["status"] != 200.0 {
		t.Fatalf("decision = %v", d)
	}
	if d["bytes_in"].(float64) < 100 || d["bytes_out"].(float64) < 100 {
		t.Fatalf("tunnel bytes not counted: %v", d)
	}
}

// connect opens a tunnel by hand and returns the connection and the
// gateway's status line.
func connect(t *testing.T, gw *gateway, target string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufioReader(c), &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatal(err)
	}
	return c, resp
}

func TestConnectSNIMismatch(t *testing.T) {
	var accepted atomic.Int32
	up := newUpstream(t, true, nil, countConns(&accepted))
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"example.com", "other.example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"example.com": {"127.0.0.1"}},
	})
	for _, sni := range []string{"other.example.com", "127.0.0.1"} {
		t.Run("sni="+sni, func(t *testing.T) {
			c, resp := connect(t, gw, "example.com:"+up.port())
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT status %d", resp.StatusCode)
			}
			cfg := up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			// An IP literal as ServerName makes crypto/tls send no SNI.
			cfg.ServerName = sni
			tc := tls.Client(c, cfg)
			err := tc.Handshake()
			if err == nil {
				t.Fatal("handshake succeeded through a mismatched SNI")
			}
		})
	}
	d := gw.logs.waitDecisions(t, 2)
	for _, line := range d {
		if line["code"] != string(CodeSNIMismatch) {
			t.Errorf("decision = %v", line)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the upstream was dialled %d times for refused tunnels", n)
	}
}

func TestConnectDeniedBefore200(t *testing.T) {
	gw := startGateway(t, gatewayConfig{
		allow: []string{"example.com"},
		names: map[string][]string{"example.com": {"10.9.8.7"}},
	})
	for target, code := range map[string]Code{
		"example.org:443": CodeAllowlist,
		"example.com:443": CodeAddressPolicy,
	} {
		_, resp := connect(t, gw, target)
		denialOf(t, resp, http.StatusForbidden, code)
	}
	gw.logs.waitDecisions(t, 2)
}

func TestMalformedRequests(t *testing.T) {
	up := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{allow: []string{"*"}, exempt: []string{up.hostPort()}})
	target := up.hostPort()
	cases := map[string]string{
		"gopher scheme":    "GET gopher://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
		"file scheme":      "GET file:///etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
		"dict scheme":      "GET dict://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
		"overflowing port": "GET http://127.0.0.1:65616/ HTTP/1.1\r\nHost: 127.0.0.1:65616\r\n\r\n",
		"zero port":        "GET http://127.0.0.1:0/ HTTP/1.1\r\nHost: 127.0.0.1:0\r\n\r\n",
		"signed port":      "CONNECT 127.0.0.1:+80 HTTP/1.1\r\nHost: 127.0.0.1:+80\r\n\r\n",
		"connect userinfo": "CONNECT user:pw@example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"connect no port":  "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"escaped host":     "GET http://exa%6dple.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"two host headers": "GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nHost: other.test\r\n\r\n",
		"cl and te":        "POST http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"obs-fold":         "GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nX-A: a\r\n b\r\n\r\n",
		"conflicting cl":   "POST http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"origin form":      "GET / HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
		"smuggled 2nd":     "POST http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nPOST http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			got := gw.raw(t, raw)
			last := got[strings.LastIndex(got, "HTTP/1.1 "):]
			if !strings.HasPrefix(last, "HTTP/1.1 400 ") {
				t.Fatalf("last answer is not 400:\n%s", got)
			}
			if name != "two host headers" && !strings.Contains(last, "X-Proxy-Error: bad-request") {
				t.Fatalf("no X-Proxy-Error in:\n%s", last)
			}
		})
	}
	// Only the first, well-formed request of "smuggled 2nd" reached it.
	if n := len(up.requests()); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}
}

// TestCurl drives the gateway with curl, the way sandboxes use it: through
// HTTP_PROXY and HTTPS_PROXY.
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required in CI")
		}
		t.Skip("curl not installed")
	}
	up := newUpstream(t, true, nil)
	plain := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"example.com", "plain.example.com"},
		exempt: []string{up.hostPort(), plain.hostPort()},
		names:  map[string][]string{"example.com": {"127.0.0.1"}, "plain.example.com": {"127.0.0.1"}},
	})
	caFile := filepath.Join(t.TempDir(), "upstream.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(curl, append([]string{"-sS", "--max-time", "10", "--cacert", caFile, "-o", "/dev/null", "-w", "%{http_code} %{http_connect}"}, args...)...)
		cmd.Env = []string{"HTTP_PROXY=http://" + gw.addr, "HTTPS_PROXY=http://" + gw.addr, "http_proxy=http://" + gw.addr, "https_proxy=http://" + gw.addr}
		out, _ := cmd.Output()
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct{ url, want string }{
		{"https://example.com:" + up.port() + "/", "200 200"},
		{"http://plain.example.com:" + plain.port() + "/", "200 000"},
		{"https://denied.test/", "000 403"},
		{"http://denied.test/", "403 000"},
	} {
		if got := run(tc.url); got != tc.want {
			t.Errorf("curl %s: got %q, want %q", tc.url, got, tc.want)
		}
	}
	gw.logs.waitDecisions(t, 4)
}
