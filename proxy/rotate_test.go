package proxy

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"testing"

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
