package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// TestRotatedSecretReachesOpenTunnel: a policy swapped in while an
// intercepted tunnel stays open (a rotated token) is injected from the next
// request in that tunnel on, over the same client connection.
func TestRotatedSecretReachesOpenTunnel(t *testing.T) {
	env := newMITMEnv(t, echoAuth, nil)
	c := env.client(t)
	var reused []bool
	get := func() string {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
		req, _ := http.NewRequest("GET", env.url("telemetry.example.com", "/"), nil)
		resp, err := c.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		reqs := env.up.requests()
		return reqs[len(reqs)-1].Header.Get("Authorization")
	}
	if got := get(); got != "Bearer "+canary {
		t.Fatalf("before the rotation the upstream got %q", hideCanary(got))
	}

	old := env.gw.srv.Policy()
	rotated := *old
	rotated.Entries = []config.Entry{{Transform: compileRules(t, map[string]string{"Authorization": "Bearer rotated-value"})}}
	rotated.Generation = 2
	if err := env.gw.srv.SetPolicy(&rotated); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "Bearer rotated-value" {
		t.Fatalf("after the rotation the upstream got %q, want the new token", hideCanary(got))
	}
	if len(reused) != 2 || !reused[1] {
		t.Fatalf("connection reuse = %v: the tunnel was not kept", reused)
	}

	// An entry of the same pattern that pins the host elsewhere never
	// gets its credential into the tunnel, whose addresses are outside
	// its pins: the tunnel keeps the last values it injected.
	repinned := rotated
	repinned.Entries = []config.Entry{{
		Transform: compileRules(t, map[string]string{"Authorization": "Bearer pinned-elsewhere"}),
		Addresses: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
	}}
	repinned.Generation = 3
	if err := env.gw.srv.SetPolicy(&repinned); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "Bearer rotated-value" {
		t.Fatalf("with the entry pinned elsewhere the open tunnel sent %q, want the last values", hideCanary(got))
	}

	// When no entry gives the tunnel's host a transform any more, the open
	// tunnel keeps the last values it injected.
	al, err := allowlist.New([]string{"other.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{Exempt: []netip.AddrPort{netip.MustParseAddrPort(env.up.hostPort())}})
	moved := &config.Policy{Allowlist: al, Addrs: addrs, Entries: []config.Entry{{Transform: compileRules(t, map[string]string{"Authorization": "Bearer elsewhere"})}}, Generation: 4}
	if err := env.gw.srv.SetPolicy(moved); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "Bearer rotated-value" {
		t.Fatalf("with the entry gone the open tunnel sent %q, want the last values", hideCanary(got))
	}
	// Each request's line names the generation of the entry it was
	// injected with: the tunnel's, the rotated one, and the rotated one
	// kept twice.
	var gens []any
	for _, d := range env.gw.logs.waitDecisions(t, 4) {
		gens = append(gens, d["generation"])
	}
	if want := []any{float64(1), float64(2), float64(2), float64(2)}; !slices.Equal(gens, want) {
		t.Fatalf("generations on the decision lines = %v, want %v", gens, want)
	}
	env.assertNoCanary(t)
}

// rotationTenants: the top level and tenant team-a both inject a token
// for api.example.com; tokenFor is team-a's.
const rotationTenants = `
ca: {cert_file: ca.pem, key_file: ca.key}
auth: {required: true}
network:
  allowlist:
    - domain: api.example.com
      transform: {Authorization: "Bearer top-level-token"}
tenants:
  - name: team-a
    proxy_auth:
      - {type: basic, user: team-a, password: "${env:PASS_A}"}
    network:
      allowlist:
        - domain: api.example.com
          transform: {Authorization: "Bearer ${env:%s}"}
`

// TestRotationStaysInTheTenant: a tenant's open intercepted tunnel takes a
// rotated token from its own tenant's policy only — never the top-level
// entry of the same pattern, nor anything once the tenant is gone.
func TestRotationStaysInTheTenant(t *testing.T) {
	e := newTenantGatewayText(t, fmt.Sprintf(rotationTenants, "TOKEN_A"))
	proxyURL := &url.URL{Scheme: "http", Host: e.gw.addr, User: url.UserPassword("team-a", passA)}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: e.pool.Clone()}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	tlsURL := "https://api.example.com:" + e.tlsUp.port() + "/"
	var reused []bool
	get := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", tlsURL, nil)
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
		resp, err := c.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return lastAuth(t, e.tlsUp)
	}
	if get() != "Bearer "+tokenA {
		t.Fatal("team-a's first request did not carry team-a's token")
	}
	// A reload of the same config: the top-level entry has the same
	// pattern and injects, but the tunnel is team-a's.
	same := tenantPolicyText(t, fmt.Sprintf(rotationTenants, "TOKEN_A"), e.tlsUp.hostPort(), e.plain.hostPort())
	same.SetGeneration(2)
	if err := e.gw.srv.SetPolicy(same); err != nil {
		t.Fatal(err)
	}
	if get() != "Bearer "+tokenA {
		t.Fatal("after a reload team-a's open tunnel did not carry team-a's token")
	}
	// team-a's token rotated: the open tunnel takes the new one.
	rotated := tenantPolicyText(t, fmt.Sprintf(rotationTenants, "TOKEN_B"), e.tlsUp.hostPort(), e.plain.hostPort())
	rotated.SetGeneration(3)
	if err := e.gw.srv.SetPolicy(rotated); err != nil {
		t.Fatal(err)
	}
	if get() != "Bearer "+tokenB {
		t.Fatal("team-a's open tunnel did not take its rotated token")
	}
	// team-a gone: its open tunnel keeps what it had, and never gets the
	// top-level token.
	gone := tenantPolicyText(t, `
ca: {cert_file: ca.pem, key_file: ca.key}
network:
  allowlist:
    - domain: api.example.com
      transform: {Authorization: "Bearer top-level-token"}
`, e.tlsUp.hostPort(), e.plain.hostPort())
	gone.SetGeneration(4)
	if err := e.gw.srv.SetPolicy(gone); err != nil {
		t.Fatal(err)
	}
	if get() != "Bearer "+tokenB {
		t.Fatal("with team-a gone its open tunnel did not keep its last token")
	}
	if len(reused) != 4 || slices.Contains(reused[1:], false) {
		t.Fatalf("connection reuse = %v: the tunnel was not kept", reused)
	}
}
