package main

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
)

// TestSinkholePolicy: network.dns.denied: sinkhole gives the DNS server the
// sinkhole addresses and makes them the gateway's own in the address policy
// (never dialled, whatever allow_cidrs re-opens); refuse does neither.
func TestSinkholePolicy(t *testing.T) {
	const base = "network:\n  allowlist: [{domain: \"*\"}]\n  allow_cidrs: [169.254.0.0/16, fd00::/8]\n"
	sink := sinkholeAddrs(true)
	for _, c := range []struct {
		yaml string
		on   bool
	}{
		{base, false},
		{base + "  dns: {denied: refuse}\n", false},
		{base + "  dns: {denied: sinkhole}\n", true},
	} {
		cfg, err := config.Parse("t.yaml", []byte(c.yaml), config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := newGateway(gatewayOptions{sinkhole: sink}, cfg, nil, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if got := g.proxy.Policy().Sinkhole; c.on != slices.Equal(got, sink) || !c.on && got != nil {
			t.Errorf("%q: DNS sinkhole %v", c.yaml, got)
		}
		for _, a := range sink {
			class, err := g.proxy.Policy().Addrs.Check(netip.AddrPortFrom(a, 443))
			if c.on && (err == nil || class != allowlist.ClassOwn) {
				t.Errorf("%q: %v is dialable (%v, %v)", c.yaml, a, class, err)
			}
			if !c.on && err != nil {
				t.Errorf("%q: %v blocked although allow_cidrs re-opens it and there is no sinkhole: %v", c.yaml, a, err)
			}
		}
	}
	if want := []netip.Addr{netip.MustParseAddr("169.254.77.1")}; !slices.Equal(sinkholeAddrs(false), want) {
		t.Errorf("sinkholeAddrs(false) = %v, want %v", sinkholeAddrs(false), want)
	}
}
