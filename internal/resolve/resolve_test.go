package resolve

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// tableResolver answers from a fixed table and counts its lookups.
type tableResolver struct {
	mu      sync.Mutex
	table   map[string][]netip.Addr
	lookups int
}

func (r *tableResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *tableResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

func newTable() *tableResolver {
	return &tableResolver{table: map[string][]netip.Addr{
		"a.test": {netip.MustParseAddr("192.0.2.1")},
		"b.test": {netip.MustParseAddr("192.0.2.2")},
		"c.test": {netip.MustParseAddr("192.0.2.3")},
	}}
}

func TestCacheTTLAndFailures(t *testing.T) {
	upstream := newTable()
	now := time.Unix(1000, 0)
	c := NewCache(upstream, 10*time.Second, 1)
	c.now = func() time.Time { return now }
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		if a, err := c.LookupNetIP(ctx, "ip", "a.test"); err != nil || a[0] != netip.MustParseAddr("192.0.2.1") {
			t.Fatalf("lookup %d: %v %v", i, a, err)
		}
	}
	if n := upstream.count(); n != 1 {
		t.Fatalf("3 lookups within the TTL asked upstream %d times, want 1", n)
	}
	now = now.Add(11 * time.Second)
	if _, err := c.LookupNetIP(ctx, "ip", "a.test"); err != nil || upstream.count() != 2 {
		t.Fatalf("an expired entry was not refreshed (%d lookups, %v)", upstream.count(), err)
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
	if n := upstream.count(); n != 5 {
		t.Fatalf("lookups = %d, want 5 (failures are asked again)", n)
	}
	if n := c.entries.Len(); n != 1 {
		t.Fatalf("cache holds %d entries, bound is 1", n)
	}
}

// A full cache drops its least recently used name, not everything: the
// name in use keeps being answered from the cache.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	upstream := newTable()
	c := NewCache(upstream, time.Hour, 2)
	ctx := context.Background()
	lookup := func(host string) {
		t.Helper()
		if _, err := c.LookupNetIP(ctx, "ip", host); err != nil {
			t.Fatal(err)
		}
	}
	lookup("a.test")
	lookup("b.test")
	lookup("a.test") // a is now the most recent
	lookup("c.test") // evicts b
	before := upstream.count()
	lookup("a.test")
	lookup("c.test")
	if n := upstream.count() - before; n != 0 {
		t.Errorf("a and c asked upstream %d times after c was added, want 0 (only b is evicted)", n)
	}
	lookup("b.test")
	if n := upstream.count() - before; n != 1 {
		t.Errorf("b asked upstream %d times, want 1 (it was evicted)", n)
	}
}

func TestCacheConcurrent(t *testing.T) {
	upstream := newTable()
	c := NewCache(upstream, time.Hour, 2)
	hosts := []string{"a.test", "b.test", "c.test"}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, err := c.LookupNetIP(context.Background(), "ip", hosts[(g+i)%len(hosts)]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := c.entries.Len(); n > 2 {
		t.Errorf("cache holds %d entries, bound is 2", n)
	}
}
