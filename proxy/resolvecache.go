package proxy

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/hookgate/hookgate/config"
)

// CachingResolver remembers successful lookups for a while, so that a burst
// of connections to one host costs one upstream query. It caches names and
// their addresses only: every address is still judged by the guard on every
// dial, so a cached answer can never get past a policy that changed.
// Failures are not cached. Safe for concurrent use.
type CachingResolver struct {
	next config.Resolver
	ttl  time.Duration
	size int
	now  func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

type cacheKey struct{ network, host string }

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

// NewCachingResolver caches next's answers for ttl (if zero, 30s), at most
// size names (if zero, 4096; when full, expired entries are dropped, then
// everything).
func NewCachingResolver(next config.Resolver, ttl time.Duration, size int) *CachingResolver {
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	if size <= 0 {
		size = 4096
	}
	return &CachingResolver{next: next, ttl: ttl, size: size, now: time.Now, entries: make(map[cacheKey]cacheEntry)}
}

// LookupNetIP answers from the cache while fresh, else asks next.
func (c *CachingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	k := cacheKey{network, host}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs, nil
	}
	addrs, err := c.next.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.entries) >= c.size {
		for key, old := range c.entries {
			if !now.Before(old.expires) {
				delete(c.entries, key)
			}
		}
		if len(c.entries) >= c.size {
			clear(c.entries)
		}
	}
	c.entries[k] = cacheEntry{addrs: addrs, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return addrs, nil
}
