package main

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/ca"
)

// TestServedGatewayCredentialKindsLeakNothing: a served gateway with an
// entry of each credential kind (basic, query, oauth2, aws_sigv4) in front
// of upstreams that echo everything they get: no secret, token or key, in
// any encoding, reaches an answer, the log, /v1/decisions, /v1/config or
// /metrics.
func TestServedGatewayCredentialKindsLeakNothing(t *testing.T) {
	raw := make([]byte, 12)
	_, _ = rand.Read(raw)
	secret := "hgcred" + hex.EncodeToString(raw)
	token := "hgtok" + hex.EncodeToString(raw)
	t.Setenv("HG_CRED_SECRET", secret)

	caDir := t.TempDir()
	upCert, leaves := upstreamLeaves(t)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, token)
			return
		}
		body, _ := io.ReadAll(r.Body)
		for k, v := range r.Header {
			w.Header()["X-Echo-"+k] = v
		}
		fmt.Fprintf(w, "%s %s\n%v\n%s", r.Method, r.RequestURI, r.Header, body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: echo, ErrorLog: log.New(io.Discard, "", 0), TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return leaves.Get(h.ServerName) }}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	ourCert, _, err := ca.Init(caDir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, n := range []string{"basic", "query", "oauth", "auth", "sig"} {
		names[n+".example.com"] = "127.0.0.1"
	}
	dnsAddr := testDNS(t, names)
	cfg := "network:\n  allowlist:\n" +
		"    - domain: basic.example.com\n      basic: {username: agent, password: \"${env:HG_CRED_SECRET}\"}\n" +
		"    - domain: query.example.com\n      query: {key: \"${env:HG_CRED_SECRET}\"}\n" +
		"    - domain: oauth.example.com\n      oauth2: {token_url: \"https://auth.example.com:" + port + "/token\", client_id: agent, client_secret: \"${env:HG_CRED_SECRET}\"}\n" +
		"    - domain: auth.example.com\n" +
		"    - domain: sig.example.com\n      aws_sigv4: {region: eu-west-1, service: bedrock, access_key_id: AKIDHG, secret_access_key: \"${env:HG_CRED_SECRET}\"}\n" +
		fmt.Sprintf("  dns: {servers: [%q]}\nupstream: {ca_file: %q}\nca: {cert_file: %q, key_file: %q}\n",
			dnsAddr, upCert, ourCert, filepath.Join(caDir, "ca-key.pem"))
	sg := serveInProcess(t, cfg, "--test-allow-upstream", "127.0.0.1:"+port)

	pem, err := os.ReadFile(ourCert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	proxyURL, _ := url.Parse("http://" + sg.proxyAddr)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	defer c.CloseIdleConnections()

	forms := map[string]string{}
	for name, v := range map[string]string{"secret": secret, "token": token, "basic pair": "agent:" + secret} {
		forms[name] = v
		forms[name+" base64"] = base64.StdEncoding.EncodeToString([]byte(v))
		forms[name+" hex"] = hex.EncodeToString([]byte(v))
	}
	noLeak := func(where, text string) {
		t.Helper()
		for name, form := range forms {
			if strings.Contains(text, form) {
				t.Errorf("%s carries the %s", where, name)
			}
		}
	}
	for _, host := range []string{"basic", "query", "oauth", "sig"} {
		u := "https://" + host + ".example.com:" + port + "/v1/x?a=1"
		resp, err := c.Post(u, "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "POST /v1/x?") {
			t.Errorf("%s: %d", u, resp.StatusCode)
		}
		var head strings.Builder
		_ = resp.Header.Write(&head)
		noLeak("the answer from "+host, head.String()+string(body))
	}
	deadline := time.Now().Add(5 * time.Second)
	var decisions string
	for {
		_, decisions = sg.admin(t, "GET", "/v1/decisions?limit=100")
		if strings.Count(decisions, `"kind":"proxy"`) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, config := sg.admin(t, "GET", "/v1/config")
	_, metrics := sg.admin(t, "GET", "/metrics")
	noLeak("/v1/decisions", decisions)
	noLeak("/v1/config", config)
	noLeak("/metrics", metrics)
	noLeak("the gateway's log", sg.logs.String())
	if !strings.Contains(config, `"credentials":"aws_sigv4 bedrock/eu-west-1"`) {
		t.Errorf("/v1/config does not name the aws_sigv4 entry's credentials")
	}
	if t.Failed() {
		sg.logs.Reset() // withheld: it may hold the secret
	}
}
