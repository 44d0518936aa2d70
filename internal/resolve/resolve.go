// Package resolve holds the one interface the gateway looks host names up
// through, and a cache in front of it. The proxy's guard and the DNS server
// both take a Resolver; *net.Resolver satisfies it, tests supply tables.
package resolve

import (
	"context"
	"net"
	"net/netip"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Resolver looks up the addresses of a host name.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

const (
	// defaultTTL is how long Cache keeps an answer when NewCache is given zero.
	defaultTTL = 30 * time.Second
	// defaultSize bounds Cache when NewCache is given zero.
	defaultSize = 4096
)

// Cache remembers successful lookups for a while, so that a burst of
// connections to one host costs one upstream query. It caches names and
// their addresses only: the caller still judges every address, so a cached
// answer can never get past a policy that changed. Failures are not cached.
// When full, the least recently used name makes room. Safe for concurrent
// use.
type Cache struct {
	next    Resolver
	ttl     time.Duration
	now     func() time.Time // time.Now; tests move it
	entries *lru.Cache[cacheKey, cacheEntry]
}

type cacheKey struct{ network, host string }

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

// NewCache caches next's answers for ttl (defaultTTL if zero or less), at
// most size names (defaultSize if zero or less).
func NewCache(next Resolver, ttl time.Duration, size int) *Cache {
	if ttl <= 0 {
		ttl = defaultTTL
	}
	if size <= 0 {
		size = defaultSize
	}
	// lru.New fails only for a size below one, excluded above.
	entries, _ := lru.New[cacheKey, cacheEntry](size)
	return &Cache{next: next, ttl: ttl, now: time.Now, entries: entries}
}

// LookupNetIP answers from the cache while fresh, else asks next.
func (c *Cache) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	k := cacheKey{network, host}
	now := c.now()
	if e, ok := c.entries.Get(k); ok && now.Before(e.expires) {
		return e.addrs, nil
	}
	addrs, err := c.next.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c.entries.Add(k, cacheEntry{addrs: addrs, expires: now.Add(c.ttl)})
	return addrs, nil
}
