package dnsserver

import (
	"net/netip"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// cacheKey is a normalised name and a query type (dns.TypeA or dns.TypeAAAA).
type cacheKey struct {
	name  string
	qtype uint16
}

// result is what upstream said about one key. It is immutable once made:
// cache hits and concurrent queries share it, and so does Decision.Addrs.
type result struct {
	// addrs are the addresses upstream returned, unmapped and without zone,
	// at most maxAddrs of them. Empty with notFound false means the name
	// exists but has no address of this family (upstream said so without
	// an error).
	addrs []netip.Addr
	// notFound is upstream's "no such host" for this family.
	notFound bool
}

// cacheEntry is one cached result and when it stops being fresh.
type cacheEntry struct {
	res     *result
	expires time.Time
}

// cache is a bounded LRU of upstream results, safe for concurrent use.
type cache struct {
	lru *lru.Cache[cacheKey, cacheEntry]
}

// newCache holds at most size entries; size must be positive.
func newCache(size int) *cache {
	// lru.New fails only for a size below one, which New excludes.
	l, _ := lru.New[cacheKey, cacheEntry](size)
	return &cache{lru: l}
}

// get returns a live entry's result and its expiry; an expired entry is
// dropped.
func (c *cache) get(k cacheKey, now time.Time) (*result, time.Time, bool) {
	e, ok := c.lru.Get(k)
	if !ok {
		return nil, time.Time{}, false
	}
	if !now.Before(e.expires) {
		c.lru.Remove(k)
		return nil, time.Time{}, false
	}
	return e.res, e.expires, true
}

// put stores r until expires, evicting the least recently used entry when
// full.
func (c *cache) put(k cacheKey, r *result, expires time.Time) {
	c.lru.Add(k, cacheEntry{res: r, expires: expires})
}

func (c *cache) len() int { return c.lru.Len() }

// flight is one upstream lookup that concurrent misses for the same key
// wait on instead of asking upstream again.
type flight struct {
	done chan struct{}
	res  *result
	exp  time.Time
	err  error
}
