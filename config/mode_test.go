package config

import "testing"

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
