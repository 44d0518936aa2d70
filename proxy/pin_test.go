package proxy

import (
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// TestMITMStripsHeaderAliases: a client copy of the injected header spelt
// with underscores (which CGI-style backends merge with the real one) never
// reaches the upstream; only the injected value does.
func TestMITMStripsHeaderAliases(t *testing.T) {
	var got http.Header
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
	}, func(gc *gatewayConfig) {
		gc.entries = []config.Entry{{Transform: compileRules(t, map[string]string{"X-Api-Key": "${env:CANARY}"})}}
	})
	req, _ := http.NewRequest("GET", env.url("telemetry.example.com", "/"), nil)
	req.Header["X_api_key"] = []string{"attacker"}
	req.Header["X_API_KEY"] = []string{"attacker2"}
	req.Header["x-api_key"] = []string{"attacker3"}
	req.Header["X-Api-Key"] = []string{"sandbox-own"}
	req.Header["X-Api-Keys"] = []string{"kept"}
	resp, err := env.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || got == nil {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var aliases []string
	for name, values := range got {
		if transform.SameHeaderName(name, "X-Api-Key") {
			aliases = append(aliases, name)
			if name != "X-Api-Key" || len(values) != 1 || values[0] != canary {
				t.Errorf("upstream got %s with %d values (want only the injected X-Api-Key)", name, len(values))
			}
		}
	}
	if len(aliases) != 1 || got.Get("X-Api-Keys") != "kept" {
		t.Fatalf("upstream got the names %v (want [X-Api-Key]) and X-Api-Keys %q", aliases, got.Get("X-Api-Keys"))
	}
	env.assertNoCanary(t)
}

// pinEnv: a plain upstream on loopback that records what it gets, and a
// gateway whose telemetry.example.com entry injects over plain HTTP with
// the given addresses pinned; open.example.com is the same upstream with
// no transform, pinned too.
func pinEnv(t *testing.T, pins ...string) (*gateway, *upstream) {
	t.Helper()
	up := newUpstream(t, false, echoAuth)
	authority, _ := newCA(t)
	var prefixes []netip.Prefix
	for _, p := range pins {
		prefixes = append(prefixes, netip.MustParsePrefix(p))
	}
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"telemetry.example.com", "open.example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"telemetry.example.com": {"127.0.0.1"}, "open.example.com": {"127.0.0.1"}},
		entries: []config.Entry{
			{Transform: compileRules(t, map[string]string{"Authorization": "Bearer ${env:CANARY}"}), AllowPlaintext: true, Addresses: prefixes},
			{Addresses: prefixes},
		},
		leaves: ca.NewLeafCache(authority, 4),
	})
	return gw, up
}

// TestPlaintextPinOutside: a name that resolves outside its entry's pinned
// addresses is refused before anything is dialled; the upstream (which is
// where the name really resolves) records nothing.
func TestPlaintextPinOutside(t *testing.T) {
	gw, up := pinEnv(t, "203.0.113.0/24")
	resp, err := gw.client(t, nil).Get("http://telemetry.example.com:" + up.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body := denialOf(t, resp, http.StatusForbidden, CodeAddressPolicy)
	if !strings.Contains(body.Reason, "telemetry.example.com resolves to 127.0.0.1, outside the addresses its allowlist entry allows") {
		t.Errorf("reason = %q", body.Reason)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["code"] != string(CodeAddressPolicy) || d["verdict"] != "deny" || d["upstream"] != nil {
		t.Fatalf("decision = %v", d)
	}
	if strings.Contains(gw.logs.String(), canary) {
		t.Fatal("the secret appears in the log")
	}
}

// TestPlaintextPinInside: inside the pin, the credential is injected.
func TestPlaintextPinInside(t *testing.T) {
	gw, up := pinEnv(t, "203.0.113.0/24", "127.0.0.1/32")
	resp, err := gw.client(t, nil).Get("http://telemetry.example.com:" + up.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != maskedAuth+"|1" {
		t.Fatalf("got %d, body of %d bytes", resp.StatusCode, len(b))
	}
	if reqs := up.requests(); len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("the upstream got %d requests, or no credential", len(reqs))
	}
}

// TestTunnelPin: the pin applies to every dial of the entry, a CONNECT
// tunnel without a transform included: refused before the 200.
func TestTunnelPin(t *testing.T) {
	gw, up := pinEnv(t, "198.51.100.0/24")
	raw := gw.raw(t, "CONNECT open.example.com:"+up.port()+" HTTP/1.1\r\nHost: open.example.com:"+up.port()+"\r\n\r\n")
	if !strings.HasPrefix(raw, "HTTP/1.1 403 ") || !strings.Contains(raw, string(CodeAddressPolicy)) {
		t.Fatalf("CONNECT answer: %q", raw)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
	if d := gw.logs.waitDecisions(t, 1)[0]; d["code"] != string(CodeAddressPolicy) || d["mode"] != "tunnel" {
		t.Fatalf("decision = %v", d)
	}
}
