package dnsserver

import (
	"context"
	"net"
	"testing"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
)

// TestTenantAnswers: a query is answered by the policy of the tenant whose
// client range holds the querier; a querier of no tenant by the top-level
// policy.
func TestTenantAnswers(t *testing.T) {
	c, err := config.Parse("c.yaml", []byte(`
network:
  allowlist: [{domain: www.example.com}]
tenants:
  - name: team-a
    clients: [192.0.2.0/28]
    network:
      allowlist: [{domain: allowed.test}]
`), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy(config.PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := newFakeResolver()
	seed(res)
	var got []Decision
	s := New(Options{Policy: func() *config.Policy { return p }, Resolver: res, Logger: zerolog.Nop(),
		OnDecision: func(d Decision) { got = append(got, d) }})
	defer s.Shutdown(context.Background())

	ask := func(from, name string) int {
		w := newRecorder("udp")
		w.remote = &net.UDPAddr{IP: net.ParseIP(from), Port: 5353}
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		s.ServeDNS(w, m)
		return w.msg.Rcode
	}
	for _, tc := range []struct {
		from, name string
		rcode      int
		tenant     string
	}{
		{"192.0.2.5", "allowed.test.", dns.RcodeSuccess, "team-a"},
		{"192.0.2.5", "www.example.com.", dns.RcodeRefused, "team-a"},
		{"198.51.100.9", "allowed.test.", dns.RcodeRefused, ""},
		{"198.51.100.9", "www.example.com.", dns.RcodeSuccess, ""},
	} {
		if rc := ask(tc.from, tc.name); rc != tc.rcode {
			t.Errorf("%s asking %s: %s, want %s", tc.from, tc.name, dns.RcodeToString[rc], dns.RcodeToString[tc.rcode])
		}
		if d := got[len(got)-1]; d.Tenant != tc.tenant {
			t.Errorf("%s asking %s: tenant %q, want %q", tc.from, tc.name, d.Tenant, tc.tenant)
		}
	}
}
