package config

import (
	"strings"
	"testing"
)

func TestNetworkMode(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"network: {}\n", ModeEnforce},
		{"network:\n  mode: enforce\n", ModeEnforce},
		{"network:\n  mode: report\n", ModeReport},
	} {
		c, err := Parse("mode.yaml", []byte(tc.text), Options{})
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		if c.Mode != tc.want || c.Reporting() != (tc.want == ModeReport) {
			t.Errorf("%q: mode %q (reporting %v), want %q", tc.text, c.Mode, c.Reporting(), tc.want)
		}
		// The compiled policy carries the mode to the proxy and the DNS
		// server.
		p, err := c.Policy(PolicyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Report != (tc.want == ModeReport) {
			t.Errorf("%q: Policy().Report = %v", tc.text, p.Report)
		}
	}
}

// A tenant takes the top-level mode unless its own network block sets one,
// and every tenant's policy is numbered with the generation it serves.
func TestTenantNetworkMode(t *testing.T) {
	c := parseTenants(t, `
network:
  mode: report
tenants:
  - name: inherits
    clients: [192.0.2.0/28]
    network:
      allowlist: [{domain: a.example.com}]
  - name: enforces
    clients: [192.0.2.16/28]
    network:
      mode: enforce
      allowlist: [{domain: b.example.com}]
  - name: reports
    clients: [192.0.2.32/28]
    network:
      mode: report
      allowlist: [{domain: c.example.com}]
`)
	p, err := c.Policy(PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.SetGeneration(7)
	want := map[string]bool{"inherits": true, "enforces": false, "reports": true}
	for _, tn := range p.Tenants.List() {
		if tn.Policy.Report != want[tn.Name] {
			t.Errorf("tenant %s: Report = %v, want %v", tn.Name, tn.Policy.Report, want[tn.Name])
		}
		if tn.Policy.Generation != 7 {
			t.Errorf("tenant %s: generation %d, want 7", tn.Name, tn.Policy.Generation)
		}
	}
	if len(p.Tenants.List()) != 3 {
		t.Fatalf("%d tenants, want 3", len(p.Tenants.List()))
	}

	_, err = Parse("bad.yaml", []byte("tenants:\n  - name: x\n    clients: [192.0.2.0/28]\n    network:\n      mode: loud\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:5: tenants[0].network.mode: \"loud\" is not a choice") {
		t.Fatalf("error = %v, want one naming tenants[0].network.mode at line 5", err)
	}
}
