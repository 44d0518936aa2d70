package proxy

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

func TestCachingResolver(t *testing.T) {
	upstream := &staticResolver{table: map[string][]netip.Addr{
		"a.test": {netip.MustParseAddr("192.0.2.1")},
		"b.test": {netip.MustParseAddr("192.0.2.2")},
	}}
	now := time.Unix(1000, 0)
	c := NewCachingResolver(upstream, 10*time.Second, 1)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	lookups := func() int { upstream.mu.Lock(); defer upstream.mu.Unlock(); return len(upstream.lookups) }

	for i := 0; i < 3; i++ {
		if a, err := c.LookupNetIP(ctx, "ip", "a.test"); err != nil || a[0] != netip.MustParseAddr("192.0.2.1") {
			t.Fatalf("lookup %d: %v %v", i, a, err)
		}
	}
	if n := lookups(); n != 1 {
		t.Fatalf("3 lookups within the TTL asked upstream %d times, want 1", n)
	}
	now = now.Add(11 * time.Second)
	if _, err := c.LookupNetIP(ctx, "ip", "a.test"); err != nil || lookups() != 2 {
		t.Fatalf("an expired entry was not refreshed (%d lookups, %v)", lookups(), err)
	}
	// Size 1: another name replaces it; failures are not cached.
	if _, err := c.LookupNetIP(ctx, "ip", "b.test"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.LookupNetIP(ctx, "ip", "missing.test"); err == nil {
			t.Fatal("a missing name resolved")
		}
	}
	if n := lookups(); n != 5 {
		t.Fatalf("lookups = %d, want 5 (failures are asked again)", n)
	}
	if len(c.entries) != 1 {
		t.Fatalf("cache holds %d entries, bound is 1", len(c.entries))
	}
}
