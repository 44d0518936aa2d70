package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
)

// TestReloadAppliesTimeouts: `gateway serve` starts with the default
// response-header timeout; a reload brings timeouts.response_header: 200ms
// for every host and 5s for llm.example.com. Then a slow upstream held past
// 200ms gets 504 upstream-timeout for quick.example.com and answers 200 for
// llm.example.com. "Slow" is an order of events: the upstream answers only
// when the test releases it, after the quick request has timed out.
func TestReloadAppliesTimeouts(t *testing.T) {
	arrived := make(chan string, 4)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Host
		select {
		case <-release:
			fmt.Fprintf(w, "answered %s", r.Host)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	dnsAddr := testDNS(t, map[string]string{"quick.example.com": "127.0.0.1", "llm.example.com": "127.0.0.1"})
	base := fmt.Sprintf("network:\n  allowlist:\n    - domain: quick.example.com\n    - domain: llm.example.com\n%%s  dns: {servers: [%q]}\nlimits: {shutdown_grace: 3s}\n%%s", dnsAddr)
	sg := serveInProcess(t, fmt.Sprintf(base, "", ""), "--test-allow-upstream", "127.0.0.1:"+port)

	sg.rewrite(t, fmt.Sprintf(base, "      timeouts: {response_header: 5s}\n", "timeouts: {response_header: 200ms}\n"))
	if code, body := sg.admin(t, "POST", "/v1/reload"); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}

	proxyURL, _ := url.Parse("http://" + sg.proxyAddr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	waitArrived := func(host string) {
		t.Helper()
		select {
		case h := <-arrived:
			if !strings.HasPrefix(h, host) {
				t.Fatalf("upstream got a request for %s, want %s", h, host)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no request for %s reached the upstream", host)
		}
	}

	type result struct {
		code int
		body string
		err  error
	}
	llm := make(chan result, 1)
	go func() {
		resp, err := c.Get("http://llm.example.com:" + port + "/v1/messages")
		if err != nil {
			llm <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		llm <- result{code: resp.StatusCode, body: string(b)}
	}()
	waitArrived("llm.example.com")

	resp, err := c.Get("http://quick.example.com:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("X-Proxy-Error") != "upstream-timeout" {
		t.Fatalf("quick.example.com: %d %q, want 504 upstream-timeout", resp.StatusCode, resp.Header.Get("X-Proxy-Error"))
	}
	waitArrived("quick.example.com")

	close(release)
	r := <-llm
	if r.err != nil || r.code != http.StatusOK || !strings.HasPrefix(r.body, "answered llm.example.com") {
		t.Fatalf("llm.example.com with its 5s response_header: %d %q %v, want 200", r.code, r.body, r.err)
	}
}

func TestCheckShowsTimeouts(t *testing.T) {
	out, _, code := runCLI(t, "check", "--config", "../../config/testdata/timeouts.yaml")
	for _, want := range []string{
		"llm.example.com (exact, response_header 10m0s)",
		"dns.denied     sinkhole",
		"timeouts       resolve 2s, dial 3s, tls_handshake 4s, response_header 1m30s, tunnel_idle 1h0m0s",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("check: code %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

func TestConfigViewShowsTimeouts(t *testing.T) {
	cfg, err := config.Load("../../config/testdata/timeouts.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(newConfigView(cfg, 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"dns_denied":"sinkhole"`,
		`"timeouts":{"dial":"3s","resolve":"2s","response_header":"1m30s","tls_handshake":"4s","tunnel_idle":"1h0m0s"}`,
		`{"domain":"llm.example.com","kind":"exact","timeouts":{"response_header":"10m0s"}}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/v1/config lacks %s:\n%s", want, b)
		}
	}
}
