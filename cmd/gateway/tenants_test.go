package main

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Canary credentials of the tenants of the gateway tests.
const (
	tenantPass   = "hg-canary-tenant-pass-6c1f0a"
	tenantBearer = "hg-canary-tenant-bearer-93be2d"
)

func (e *opsEnv) tenantConfig() string {
	return e.config("example.com") + `auth: {required: true}
tenants:
  - name: team-a
    proxy_auth: [{type: basic, user: team-a, password: "${env:HG_TEN_PASS}"}]
    network:
      allowlist:
        - domain: inject.example.com
          transform: {Authorization: "Bearer ${env:HG_OPS_TOKEN}"}
  - name: team-b
    proxy_auth: [{type: bearer, token: "${env:HG_TEN_BEARER}"}]
    network:
      allowlist: [{domain: example.com}]
`
}

func (e *opsEnv) tenantClient(sg *servedGateway, user *url.Userinfo, header string) *http.Client {
	proxyURL := &url.URL{Scheme: "http", Host: sg.proxyAddr, User: user}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: e.pool}, DisableKeepAlives: true}
	if header != "" {
		tr.ProxyConnectHeader = http.Header{"Proxy-Authorization": {header}}
	}
	return &http.Client{Transport: tr}
}

// TestGatewayTenants runs the gateway with two tenants: each reaches only
// its own hosts, the tenant is on the decisions, in /v1/decisions?tenant=
// and in the metrics, and no credential (or its hash) is in any of them.
func TestGatewayTenants(t *testing.T) {
	e := newOpsEnv(t)
	t.Setenv("HG_TEN_PASS", tenantPass)
	t.Setenv("HG_TEN_BEARER", tenantBearer)
	sg := serveInProcess(t, e.tenantConfig(), e.args()...)

	a := e.tenantClient(sg, url.UserPassword("team-a", tenantPass), "")
	b := e.tenantClient(sg, nil, "Bearer "+tenantBearer)
	if code, body := get(t, a, e.url("inject.example.com", "/")); code != 200 || !strings.Contains(body, "[redacted]") {
		t.Fatalf("team-a: %d %s", code, body)
	}
	if code, _ := get(t, b, e.url("example.com", "/")); code != 200 {
		t.Fatalf("team-b: %d", code)
	}
	if code, body := get(t, b, e.url("inject.example.com", "/")); code != 0 || !strings.Contains(body, "Forbidden") {
		t.Fatalf("team-b to team-a's host: %d %s", code, body)
	}
	if code, body := get(t, e.client(sg), e.url("example.com", "/")); code != 0 || !strings.Contains(body, "Proxy Authentication Required") {
		t.Fatalf("unidentified: %d %s", code, body)
	}

	sg.waitMetrics(t, `hookgate_tenant_requests_total{code="",tenant="team-a",verdict="allow"} 1`,
		`hookgate_tenant_requests_total{code="",tenant="team-b",verdict="allow"} 1`,
		`hookgate_tenant_requests_total{code="blocked-by-allowlist",tenant="team-b",verdict="deny"} 1`)
	code, body := sg.admin(t, "GET", "/v1/decisions?tenant=team-b")
	var got []struct {
		Tenant, Host, Verdict string
	}
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got) != 2 {
		t.Fatalf("/v1/decisions?tenant=team-b: %d %s", code, body)
	}
	for _, d := range got {
		if d.Tenant != "team-b" {
			t.Fatalf("a decision of %q in team-b's answer", d.Tenant)
		}
	}
	if code, _ := sg.admin(t, "GET", "/v1/decisions?tenant="); code != 400 {
		t.Fatalf("an empty tenant: %d", code)
	}

	var texts []string
	texts = append(texts, sg.logs.String())
	for _, path := range []string{"/metrics", "/v1/decisions", "/v1/config"} {
		_, body := sg.admin(t, "GET", path)
		texts = append(texts, body)
	}
	for i, text := range texts {
		for _, secret := range []string{tenantPass, tenantBearer, e.token} {
			sum := sha256.Sum256([]byte(secret))
			for _, form := range []string{secret, hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString([]byte("team-a:" + secret))} {
				if strings.Contains(text, form) {
					t.Fatalf("answer %d holds a credential or its hash", i)
				}
			}
		}
	}
	if !strings.Contains(texts[0], `"tenant":"team-a"`) {
		t.Fatal("no decision line names team-a")
	}
	// A reload without team-b: its next request gets 407, team-a's go on.
	sg.rewrite(t, strings.Split(e.tenantConfig(), "  - name: team-b")[0])
	if code, body := sg.admin(t, "POST", "/v1/reload"); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if code, body := get(t, b, e.url("example.com", "/")); code != 0 || !strings.Contains(body, "Proxy Authentication Required") {
		t.Fatalf("the removed tenant after the reload: %d %s", code, body)
	}
	if code, _ := get(t, a, e.url("inject.example.com", "/")); code != 200 {
		t.Fatalf("team-a after the reload: %d", code)
	}
	if !strings.Contains(texts[3], `"identified_by":["proxy_auth basic user team-a"]`) || !strings.Contains(texts[3], `"Authorization":"Bearer ${env:HG_OPS_TOKEN}"`) {
		t.Fatalf("/v1/config does not show the tenants:\n%s", texts[3])
	}
}
