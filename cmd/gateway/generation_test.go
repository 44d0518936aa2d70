package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
)

// TestOneGeneration: the DNS server judges by the proxy's policy, the one
// generation a reload swaps: a name the reload allows is answered at once,
// one it removes is refused at once, and both servers hold the same value.
func TestOneGeneration(t *testing.T) {
	upstream := testDNS(t, map[string]string{"a.example": "198.51.100.10", "b.example": "198.51.100.11"})
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(domain string) {
		yaml := "network:\n  allowlist: [{domain: " + domain + "}]\n  dns: {servers: [\"" + upstream + "\"]}\n"
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.example")
	cfg, err := config.Load(file, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGateway(gatewayOptions{configFile: file}, cfg, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.dns.ServeUDP(pc) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.dns.Shutdown(ctx)
	})
	ask := func(name string) int {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		c := &dns.Client{Timeout: 5 * time.Second}
		r, _, err := c.Exchange(m, pc.LocalAddr().String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r.Rcode
	}

	if a, b := ask("a.example."), ask("b.example."); a != dns.RcodeSuccess || b != dns.RcodeRefused {
		t.Fatalf("before the reload: a %s, b %s; want NOERROR, REFUSED", dns.RcodeToString[a], dns.RcodeToString[b])
	}
	before := g.proxy.Policy()
	write("b.example")
	if _, err := g.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.proxy.Policy() == before {
		t.Fatal("the reload did not swap the policy")
	}
	if a, b := ask("a.example."), ask("b.example."); a != dns.RcodeRefused || b != dns.RcodeSuccess {
		t.Fatalf("after the reload: a %s, b %s; want REFUSED, NOERROR", dns.RcodeToString[a], dns.RcodeToString[b])
	}
}
