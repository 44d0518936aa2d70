package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestReportModeLetsThroughWhatTheAllowlistDenies: in report mode a host
// off the allowlist is reached, over plain HTTP and through a tunnel, and
// logged as would-deny with the code it would have been refused with.
func TestReportModeLetsThroughWhatTheAllowlistDenies(t *testing.T) {
	up := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"listed.example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"unlisted.example.net": {"127.0.0.1"}},
		report: true,
	})
	resp, err := gw.client(t, nil).Get("http://unlisted.example.net:" + up.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello from upstream" {
		t.Fatalf("report mode: %d %q, want the upstream's answer", resp.StatusCode, body)
	}
	d := gw.logs.waitDecisions(t, 1)[0]
	if d["verdict"] != VerdictWouldDeny || d["code"] != string(CodeAllowlist) || d["generation"] != float64(1) {
		t.Fatalf("decision = %v, want verdict would-deny, code %s, generation 1", d, CodeAllowlist)
	}
	if !strings.Contains(d["reason"].(string), "network.mode is report") {
		t.Fatalf("reason = %q", d["reason"])
	}
}

// TestEnforceModeStillDenies is the control: the same request without
// report mode is refused by the allowlist and never reaches the upstream.
func TestEnforceModeStillDenies(t *testing.T) {
	up := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{
		allow:  []string{"listed.example.com"},
		exempt: []string{up.hostPort()},
		names:  map[string][]string{"unlisted.example.net": {"127.0.0.1"}},
	})
	resp, err := gw.client(t, nil).Get("http://unlisted.example.net:" + up.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(up.requests()) != 0 {
		t.Fatalf("enforce mode: %d, %d upstream requests; want 403 and none", resp.StatusCode, len(up.requests()))
	}
	if d := gw.logs.waitDecisions(t, 1)[0]; d["verdict"] != VerdictDeny {
		t.Fatalf("decision = %v", d)
	}
}

// TestReportModeKeepsTheAddressPolicy: report mode waives only the
// allowlist: a name resolving to a metadata or private address and an
// address literal are refused by the address policy, and localhost keeps
// its allowlist refusal (it names the loopback interface); nothing is
// dialled.
func TestReportModeKeepsTheAddressPolicy(t *testing.T) {
	up := newUpstream(t, false, nil)
	gw := startGateway(t, gatewayConfig{
		allow: []string{"listed.example.com"},
		names: map[string][]string{
			"metadata.example.net": {"169.254.169.254"},
			"private.example.net":  {"10.1.2.3"},
		},
		report: true,
	})
	c := gw.client(t, nil)
	for u, code := range map[string]Code{
		"http://metadata.example.net/":             CodeAddressPolicy,
		"http://private.example.net/":              CodeAddressPolicy,
		"http://169.254.169.254/latest/meta-data/": CodeAddressPolicy,
		"http://" + up.hostPort() + "/":            CodeAddressPolicy,
		"http://localhost:" + up.port() + "/":      CodeAllowlist,
	} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Proxy-Error") != string(code) {
			t.Errorf("%s: %d %s, want 403 %s", u, resp.StatusCode, resp.Header.Get("X-Proxy-Error"), code)
		}
	}
	for _, d := range gw.logs.waitDecisions(t, 5) {
		if d["verdict"] != VerdictDeny {
			t.Errorf("decision = %v, want deny", d)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream on loopback got %d requests", n)
	}
}

// TestReportModeNeverInjects: a would-deny host that the client reaches
// through a tunnel is tunnelled opaquely: no interception, no credential,
// even when it shares a domain with an entry that has a transform.
func TestReportModeNeverInjects(t *testing.T) {
	env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) {
		gc.allow = []string{"telemetry.example.com"}
		gc.report = true
	})
	c := env.client(t)
	resp, err := c.Get(env.url("other.example.com", "/"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	if string(body) != "|0" {
		t.Fatalf("a would-deny host received Authorization: %q", hideCanary(string(body)))
	}
	if resp.TLS.PeerCertificates[0].Subject.CommonName != env.up.Certificate().Subject.CommonName {
		t.Fatal("a would-deny host was intercepted")
	}
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if d["verdict"] != VerdictWouldDeny || d["mode"] != "tunnel" || d["injected"] != nil {
		t.Fatalf("decision = %v", d)
	}
	env.assertNoCanary(t)
}
