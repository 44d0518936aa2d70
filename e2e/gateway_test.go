package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// proxyAddr is the gateway's explicit listener, on lo of its namespace.
const proxyAddr = "127.0.0.1:3128"

// Bounds on the waits of this test.
const (
	startTimeout    = 30 * time.Second // a process coming up (the -race gateway is slow to start)
	curlTimeout     = 15 * time.Second // one curl, all included
	decisionTimeout = 10 * time.Second // a decision line appearing after the response
	stopTimeout     = 15 * time.Second // the gateway's graceful stop after SIGTERM
	pollInterval    = 20 * time.Millisecond
)

// gatewayConfig is the config the gateway serves. mixed.test resolves to a
// public and a private address and must be refused as a whole.
const gatewayConfig = `listen: {proxy: 127.0.0.1:3128}
network:
  allowlist:
    - domain: allowed.test
    - domain: "*.allowed.test"
    - domain: loopback.test
    - domain: metadata.test
    - domain: mixed.test
  dns: {servers: ["203.0.113.2:53"]}
log: {level: info}
`

// poisonProxy is set as HTTP(S)_PROXY in the gateway's environment: the
// gateway must not use it (goproxy's default transport would). It is a closed
// port on the upstream, so using it fails the allowed cases and goes nowhere
// outside the test network.
const poisonProxy = "http://203.0.113.2:9"

// harness is one running topology: upstream, gateway and the clients.
type harness struct {
	t        *testing.T
	ip, curl string
	topo     *topology
	dir      string
	caPath   string
	pool     *x509.CertPool
	gwNS     netns.NsHandle
	gateway  *proc
	upstream *proc

	requests int // requests made through the gateway, one decision line each
}

// poll calls cond until it is true, for at most d; it reports the last result.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for i := 0; i < int(d/pollInterval)+1 && time.Now().Before(deadline); i++ {
		if cond() {
			return true
		}
		time.Sleep(pollInterval)
	}
	return cond()
}

func TestGatewayInNetns(t *testing.T) {
	ip, curl := requireE2E(t)
	h := &harness{t: t, ip: ip, curl: curl}
	h.topo = setupNetns(t, ip)
	h.dir = t.TempDir()
	h.caPath, h.pool = writeCerts(t, h.dir)
	h.startUpstream()
	h.startGateway()

	t.Run("http allowed", func(t *testing.T) {
		res, delta := h.curlCase(t, "http://allowed.test/", 200, "", "http", "allowed.test", 80)
		if !strings.Contains(string(res.body), "upstream saw allowed.test /") {
			t.Errorf("body %q: not the upstream's answer", res.body)
		}
		reqs := kinds(delta, "http")
		if len(reqs) != 1 {
			t.Fatalf("upstream got %d HTTP requests, want 1: %v", len(reqs), delta)
		}
		r := reqs[0]
		if r.Host != "allowed.test" || r.Method != "GET" || r.URI != "/" || r.TLS {
			t.Errorf("upstream got %s, want GET / with Host: allowed.test over plain HTTP", r)
		}
		for _, hdr := range []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"} {
			if v := r.Header.Values(hdr); len(v) > 0 {
				t.Errorf("upstream got hop-by-hop header %s: %q", hdr, v)
			}
		}
	})

	t.Run("https allowed via CONNECT", func(t *testing.T) {
		res, delta := h.curlCase(t, "https://www.allowed.test/", 200, "", "tunnel", "www.allowed.test", 443)
		if !strings.Contains(string(res.body), "upstream saw www.allowed.test /") {
			t.Errorf("body %q: not the upstream's answer", res.body)
		}
		hellos := kinds(delta, "tls")
		if len(hellos) != 1 || hellos[0].Host != "www.allowed.test" {
			t.Errorf("upstream TLS ClientHellos %v, want one with SNI www.allowed.test", hellos)
		}
		reqs := kinds(delta, "http")
		if len(reqs) != 1 || reqs[0].Host != "www.allowed.test" || !reqs[0].TLS {
			t.Errorf("upstream HTTP requests %v, want one over TLS with Host: www.allowed.test", reqs)
		}
	})

	t.Run("http denied by allowlist", func(t *testing.T) {
		res, _ := h.curlCase(t, "http://denied.test/", 403, "blocked-by-allowlist", "http", "denied.test", 80)
		checkDenyBody(t, res.body, "blocked-by-allowlist", "denied.test")
	})
	t.Run("https denied by allowlist", func(t *testing.T) {
		h.curlCase(t, "https://denied.test/", 403, "blocked-by-allowlist", "tunnel", "denied.test", 443)
	})

	for _, c := range []struct{ name, host string }{
		{"loopback", "loopback.test"},   // resolves to 127.0.0.1
		{"metadata", "metadata.test"},   // resolves to 169.254.169.254
		{"mixed answers", "mixed.test"}, // resolves to 203.0.113.2 and 10.0.0.1
	} {
		t.Run("http "+c.name+" denied by address policy", func(t *testing.T) {
			res, delta := h.curlCase(t, "http://"+c.host+"/", 403, "blocked-by-address-policy", "http", c.host, 80)
			checkDenyBody(t, res.body, "blocked-by-address-policy", c.host)
			if qs := dnsQueries(delta, c.host); len(qs) == 0 {
				t.Errorf("the upstream DNS server got no query for %s: the refusal was not based on what it resolves to", c.host)
			}
		})
		t.Run("https "+c.name+" denied by address policy", func(t *testing.T) {
			h.curlCase(t, "https://"+c.host+"/", 403, "blocked-by-address-policy", "tunnel", c.host, 443)
		})
	}

	t.Run("go client", func(t *testing.T) {
		h.goClientCases(t)
	})

	t.Run("gateway stops and logged one decision per request", func(t *testing.T) {
		h.stopGateway(t)
	})

	t.Run("upstream saw only allowed traffic", func(t *testing.T) {
		h.checkAllRecords(t)
	})
}

// startUpstream runs the upstream role in the upstream namespace and waits
// until it has bound its sockets.
func (h *harness) startUpstream() {
	t := h.t
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		roleEnv + "=" + roleUpstream,
		dirEnv + "=" + h.dir,
		addrEnv + "=" + upstreamIP.String(),
		"PATH=" + os.Getenv("PATH"),
	}
	// `ip netns exec` executes a path: /proc/self/exe there would be ip itself.
	h.upstream = startIn(t, h.ip, h.topo.upNS, "upstream", env, lifeR, self, "-test.run=^$")
	t.Cleanup(func() {
		_ = lifeW.Close() // the upstream exits on EOF; its own cleanup kills it if not
		h.upstream.wait(3 * time.Second)
	})
	ready := filepath.Join(h.dir, readyFile)
	if !poll(startTimeout, func() bool {
		_, err := os.Stat(ready)
		return err == nil || h.upstream.exited()
	}) || h.upstream.exited() {
		t.Fatalf("upstream not ready within %v (exited: %v, err %v)\nstderr:\n%s",
			startTimeout, h.upstream.exited(), h.upstream.err, h.upstream.stderr.String())
	}
}

// startGateway writes the config, runs `gateway serve` in the gateway
// namespace and waits until it accepts connections and has said so.
func (h *harness) startGateway() {
	t := h.t
	cfg := filepath.Join(h.dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(gatewayConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(gatewayBin, "check", "--config", cfg); err != nil {
		t.Fatalf("gateway check: %v", err)
	} else {
		t.Logf("gateway check:\n%s", out)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HTTP_PROXY=" + poisonProxy, "HTTPS_PROXY=" + poisonProxy,
		"http_proxy=" + poisonProxy, "https_proxy=" + poisonProxy,
	}
	h.gateway = startIn(t, h.ip, h.topo.gwNS, "gateway", env, nil, gatewayBin, "serve", "--config", cfg)

	var err error
	h.gwNS, err = netns.GetFromName(h.topo.gwNS)
	if err != nil {
		t.Fatalf("opening namespace %s: %v", h.topo.gwNS, err)
	}
	t.Cleanup(func() { _ = h.gwNS.Close() })

	var lastErr error
	up := poll(startTimeout, func() bool {
		if h.gateway.exited() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := dialIn(ctx, h.gwNS, "tcp", proxyAddr)
		if err != nil {
			lastErr = err
			return false
		}
		_ = c.Close()
		return hasLogMessage(h.gateway.stderr.String(), "gateway listening")
	})
	if !up || h.gateway.exited() {
		t.Fatalf("gateway not listening on %s within %v (exited: %v %v; last dial error: %v)\nstderr:\n%s",
			proxyAddr, startTimeout, h.gateway.exited(), h.gateway.err, lastErr, h.gateway.stderr.String())
	}
}

// curlResult is what one curl run showed.
type curlResult struct {
	code    int    // %{http_code}: the final response (0 if there was none)
	connect int    // %{http_connect}: the proxy's answer to CONNECT (0 if none)
	headers string // every header block (-D), CONNECT response included
	body    []byte
	exit    int
	stderr  string
}

// curlThrough fetches url with curl inside the gateway namespace, through
// the proxy: --proxy for http, HTTPS_PROXY for https, the test CA trusted.
func (h *harness) curlThrough(t *testing.T, rawURL string) curlResult {
	t.Helper()
	dir := t.TempDir()
	hdrFile, bodyFile := filepath.Join(dir, "headers"), filepath.Join(dir, "body")
	args := []string{
		"netns", "exec", h.topo.gwNS, h.curl,
		"-q", // no ~/.curlrc
		"--silent", "--show-error",
		"--max-time", "10", "--connect-timeout", "5",
		"--cacert", h.caPath,
		"-D", hdrFile, "-o", bodyFile,
		"-w", "%{http_code} %{http_connect}",
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	if strings.HasPrefix(rawURL, "https:") {
		env = append(env, "HTTPS_PROXY=http://"+proxyAddr)
	} else {
		args = append(args, "--proxy", "http://"+proxyAddr)
	}
	args = append(args, rawURL)

	ctx, cancel := context.WithTimeout(context.Background(), curlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.ip, args...)
	cmd.Env = env
	cmd.WaitDelay = 2 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	h.requests++

	res := curlResult{stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && ctx.Err() == nil:
		res.exit = exitErr.ExitCode()
	default:
		t.Fatalf("curl %s: %v (stderr %q)", rawURL, err, stderr.String())
	}
	if _, err := fmt.Sscanf(stdout.String(), "%d %d", &res.code, &res.connect); err != nil {
		t.Fatalf("curl %s: -w output %q: %v (stderr %q)", rawURL, stdout.String(), err, res.stderr)
	}
	if b, err := os.ReadFile(hdrFile); err == nil {
		res.headers = string(b)
	}
	if b, err := os.ReadFile(bodyFile); err == nil {
		res.body = b
	}
	return res
}

// headerValues returns the values of header name in every block of a -D dump.
func headerValues(dump, name string) []string {
	var vals []string
	prefix := strings.ToLower(name) + ":"
	for _, line := range strings.Split(dump, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.HasPrefix(strings.ToLower(line), prefix) {
			vals = append(vals, strings.TrimSpace(line[len(prefix):]))
		}
	}
	return vals
}

// curlCase runs one request with curl and checks the status the client saw,
// X-Proxy-Error, the one decision line, and that a denied request reached
// nothing but (for address-policy denials) the DNS server. It returns curl's
// result and what the upstream recorded meanwhile.
func (h *harness) curlCase(t *testing.T, rawURL string, wantStatus int, wantCode, wantMode, wantHost string, wantPort int) (curlResult, []record) {
	t.Helper()
	recsBefore := len(h.records(t))
	decBefore := len(decisionLines(t, h.gateway.stderr.String()))

	res := h.curlThrough(t, rawURL)
	t.Logf("curl %s: http_code=%d http_connect=%d exit=%d %s", rawURL, res.code, res.connect, res.exit, strings.TrimSpace(res.stderr))

	tunnel := wantMode == "tunnel"
	switch {
	case tunnel && wantCode != "":
		// Refused before any 200: curl shows the proxy's status to CONNECT.
		if res.connect != wantStatus || res.code != 0 && res.code != wantStatus {
			t.Errorf("CONNECT answered %d (final %d), want %d", res.connect, res.code, wantStatus)
		}
	case tunnel:
		if res.connect != 200 || res.code != wantStatus {
			t.Errorf("CONNECT answered %d, then %d; want 200, then %d (curl exit %d: %s)", res.connect, res.code, wantStatus, res.exit, res.stderr)
		}
	default:
		if res.code != wantStatus || res.connect != 0 {
			t.Errorf("status %d (CONNECT %d), want %d (curl exit %d: %s)", res.code, res.connect, wantStatus, res.exit, res.stderr)
		}
	}
	gotCodes := headerValues(res.headers, "X-Proxy-Error")
	if wantCode == "" {
		if len(gotCodes) != 0 {
			t.Errorf("X-Proxy-Error %q on an allowed request", gotCodes)
		}
		if up := headerValues(res.headers, "X-Upstream"); len(up) != 1 {
			t.Errorf("response has X-Upstream %q: not from the upstream?\n%s", up, res.headers)
		}
	} else if len(gotCodes) != 1 || gotCodes[0] != wantCode {
		t.Errorf("X-Proxy-Error %q, want %q\nheaders:\n%s", gotCodes, wantCode, res.headers)
	}

	// One decision line for this request.
	var decs []decisionLine
	poll(decisionTimeout, func() bool {
		decs = decisionLines(t, h.gateway.stderr.String())
		return len(decs) >= decBefore+1
	})
	if len(decs) != decBefore+1 {
		t.Errorf("%d decision lines for this request, want 1:\n%s", len(decs)-decBefore, rawLines(decs[min(decBefore, len(decs)):]))
	} else {
		checkDecision(t, decs[decBefore], wantMode, wantHost, wantPort, wantCode, wantStatus)
	}

	delta := h.records(t)[recsBefore:]
	if wantCode != "" {
		for _, r := range delta {
			if r.Kind != "dns" {
				t.Errorf("denied request reached the upstream: %s", r)
			}
		}
	}
	if wantCode != "blocked-by-address-policy" {
		if qs := dnsQueries(delta, ""); wantCode != "" && len(qs) > 0 {
			t.Errorf("denied name was resolved: %v", qs)
		}
	}
	return res, delta
}

// checkDenyBody checks the JSON body of a denial made by the gateway.
func checkDenyBody(t *testing.T, body []byte, code, host string) {
	t.Helper()
	var b struct {
		Error  string `json:"error"`
		Host   string `json:"host"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Errorf("denial body %q: not JSON: %v", body, err)
		return
	}
	if b.Error != code || b.Host != host || b.Reason == "" {
		t.Errorf("denial body %q: want error %q, host %q and a reason", body, code, host)
	}
}

// decisionLine is the part of the gateway's decision log line we check.
type decisionLine struct {
	Message  string `json:"message"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Mode     string `json:"mode"`
	Verdict  string `json:"verdict"`
	Code     string `json:"code"`
	Reason   string `json:"reason"`
	Status   int    `json:"status"`
	Upstream string `json:"upstream"`
	raw      string
}

// logLines calls each for every complete JSON line of the gateway's log.
// (stopGateway checks that there is nothing else in it.)
func logLines(t *testing.T, stderr string, each func(raw string, fields map[string]any)) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || !strings.HasPrefix(line, "{") {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			continue // a line still being written
		}
		each(line, fields)
	}
}

func hasLogMessage(stderr, msg string) bool {
	found := false
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		var l struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == msg {
			found = true
		}
	}
	return found
}

func decisionLines(t *testing.T, stderr string) []decisionLine {
	t.Helper()
	var out []decisionLine
	logLines(t, stderr, func(raw string, fields map[string]any) {
		if fields["message"] != "decision" {
			return
		}
		var d decisionLine
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			t.Errorf("decision line %s: %v", raw, err)
			return
		}
		d.raw = raw
		out = append(out, d)
	})
	return out
}

func rawLines(ds []decisionLine) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.raw)
		b.WriteByte('\n')
	}
	return b.String()
}

func checkDecision(t *testing.T, d decisionLine, mode, host string, port int, code string, status int) {
	t.Helper()
	verdict := "allow"
	if code != "" {
		verdict = "deny"
	}
	if d.Mode != mode || d.Host != host || d.Port != port || d.Verdict != verdict || d.Code != code {
		t.Errorf("decision line %s\nwant mode %q host %q port %d verdict %q code %q", d.raw, mode, host, port, verdict, code)
	}
	if code != "" && (d.Reason == "" || d.Status != status) {
		t.Errorf("decision line %s: want a reason and status %d", d.raw, status)
	}
	if code == "" && mode == "http" && d.Status != status {
		t.Errorf("decision line %s: want status %d", d.raw, status)
	}
	if d.Upstream != "" {
		if ap, err := netip.ParseAddrPort(d.Upstream); err != nil || ap.Addr() != upstreamIP || int(ap.Port()) != port {
			t.Errorf("decision line %s: upstream %q, want %s:%d", d.raw, d.Upstream, upstreamIP, port)
		}
	}
}

func (h *harness) records(t *testing.T) []record {
	t.Helper()
	recs, err := readRecords(filepath.Join(h.dir, recordsFile))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func kinds(recs []record, kind string) []record {
	var out []record
	for _, r := range recs {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// dnsQueries returns the DNS questions about host (any, if host is ""),
// search-list expansions of it included.
func dnsQueries(recs []record, host string) []record {
	var out []record
	for _, r := range kinds(recs, "dns") {
		if host == "" || r.Host == host+"." || strings.HasPrefix(r.Host, host+".") {
			out = append(out, r)
		}
	}
	return out
}

// goClientCases makes requests with a Go client whose sockets are created in
// the gateway's namespace.
func (h *harness) goClientCases(t *testing.T) {
	proxyURL := &url.URL{Scheme: "http", Host: proxyAddr}
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != proxyAddr {
				return nil, fmt.Errorf("test client refuses to dial %s: only the proxy", addr)
			}
			return dialIn(ctx, h.gwNS, network, addr)
		},
		TLSClientConfig:       &tls.Config{RootCAs: h.pool, MinVersion: tls.VersionTLS12},
		DisableKeepAlives:     true, // each tunnel ends, and is logged, with its request
		ResponseHeaderTimeout: 10 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: curlTimeout}

	for _, c := range []struct {
		method, url string
		body        string
		status      int
		code        string
		mode, host  string
		port        int
	}{
		{"POST", "http://allowed.test/go-client", "hello", 200, "", "http", "allowed.test", 80},
		{"GET", "https://www.allowed.test/go-client", "", 200, "", "tunnel", "www.allowed.test", 443},
		{"GET", "http://mixed.test/go-client", "", 403, "blocked-by-address-policy", "http", "mixed.test", 80},
		{"GET", "http://denied.test/go-client", "", 403, "blocked-by-allowlist", "http", "denied.test", 80},
	} {
		t.Run(c.method+" "+c.url, func(t *testing.T) {
			recsBefore := len(h.records(t))
			decBefore := len(decisionLines(t, h.gateway.stderr.String()))
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req, err := http.NewRequest(c.method, c.url, body)
			if err != nil {
				t.Fatal(err)
			}
			h.requests++
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.url, err)
			}
			respBody, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status || resp.Header.Get("X-Proxy-Error") != c.code {
				t.Errorf("got %d X-Proxy-Error %q, want %d %q (body %q)", resp.StatusCode, resp.Header.Get("X-Proxy-Error"), c.status, c.code, respBody)
			}
			var decs []decisionLine
			poll(decisionTimeout, func() bool {
				decs = decisionLines(t, h.gateway.stderr.String())
				return len(decs) >= decBefore+1
			})
			if len(decs) != decBefore+1 {
				t.Errorf("%d decision lines for this request, want 1", len(decs)-decBefore)
			} else {
				checkDecision(t, decs[decBefore], c.mode, c.host, c.port, c.code, c.status)
			}
			delta := h.records(t)[recsBefore:]
			if c.code != "" {
				for _, r := range delta {
					if r.Kind != "dns" {
						t.Errorf("denied request reached the upstream: %s", r)
					}
				}
				return
			}
			reqs := kinds(delta, "http")
			if len(reqs) != 1 || reqs[0].Method != c.method || reqs[0].Host != c.host || reqs[0].URI != "/go-client" {
				t.Errorf("upstream got %v, want one %s /go-client with Host: %s", reqs, c.method, c.host)
			}
		})
	}
}

// stopGateway sends SIGTERM, expects a clean exit, and then checks the whole
// log: exactly one decision line per request made, no race report. A late
// duplicate line is in it too: the gateway writes every line before it
// exits, and the exit is what this waits for.
func (h *harness) stopGateway(t *testing.T) {
	if err := h.gateway.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to the gateway: %v", err)
	}
	if !h.gateway.wait(stopTimeout) {
		t.Fatalf("gateway did not exit within %v of SIGTERM", stopTimeout)
	}
	stderr := h.gateway.stderr.String()
	if h.gateway.err != nil {
		t.Errorf("gateway exit after SIGTERM: %v, want status 0", h.gateway.err)
	}
	if strings.Contains(stderr, "DATA RACE") {
		t.Errorf("the race detector reported a race in the gateway:\n%s", stderr)
	}
	decs := decisionLines(t, stderr)
	if len(decs) != h.requests {
		t.Errorf("%d decision lines for %d requests:\n%s", len(decs), h.requests, rawLines(decs))
	}
	nonJSON := 0
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !json.Valid([]byte(line)) {
			nonJSON++
			if nonJSON <= 5 {
				t.Errorf("gateway stderr line is not JSON: %q", line)
			}
		}
	}
}

// checkAllRecords looks at everything the upstream got, at the end.
func (h *harness) checkAllRecords(t *testing.T) {
	recs := h.records(t)
	if qs := dnsQueries(recs, "denied.test"); len(qs) > 0 {
		t.Errorf("a name the allowlist denies was resolved: %v", qs)
	}
	for _, r := range recs {
		host, _, err := net.SplitHostPort(r.Remote)
		if err != nil {
			t.Errorf("record %s: bad remote: %v", r, err)
			continue
		}
		if a, err := netip.ParseAddr(host); err != nil || a.Unmap() != gatewayIP {
			t.Errorf("record %s: from %s, want the gateway %s", r, host, gatewayIP)
		}
	}
	var got []string
	for _, r := range kinds(recs, "http") {
		got = append(got, fmt.Sprintf("%s %s %s tls=%v", r.Method, r.Host, r.URI, r.TLS))
	}
	want := []string{
		"GET allowed.test / tls=false",
		"GET www.allowed.test / tls=true",
		"POST allowed.test /go-client tls=false",
		"GET www.allowed.test /go-client tls=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("upstream HTTP requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	accepts := map[int]int{}
	for _, r := range kinds(recs, "accept") {
		accepts[r.Port]++
	}
	// Two plain requests may share one kept-alive upstream connection; each
	// tunnel has its own.
	if accepts[80] < 1 || accepts[80] > 2 || accepts[443] != 2 || len(accepts) != 2 {
		t.Errorf("upstream connections per port %v, want 1 or 2 on 80 and 2 on 443", accepts)
	}
	t.Logf("upstream records: %d (%d DNS questions)", len(recs), len(kinds(recs, "dns")))
}
