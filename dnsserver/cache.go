package dnsserver

import (
	"net/netip"
	"sync"
	"time"
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

// cacheEntry is one node of the LRU list.
type cacheEntry struct {
	key        cacheKey
	res        *result
	expires    time.Time
	prev, next *cacheEntry
}

// cache is a bounded LRU of upstream results, safe for concurrent use.
// One mutex is enough: a hit holds it for a map lookup and two pointer
// moves, far below the cost of reading and writing the packet.
type cache struct {
	mu   sync.Mutex
	max  int
	m    map[cacheKey]*cacheEntry
	head cacheEntry // sentinel: head.next is the most recently used
}

func newCache(size int) *cache {
	c := &cache{max: size, m: make(map[cacheKey]*cacheEntry, min(size, 1024))}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

// get returns a live entry's result and its expiry.
func (c *cache) get(k cacheKey, now time.Time) (*result, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, time.Time{}, false
	}
	if !now.Before(e.expires) {
		c.remove(e)
		return nil, time.Time{}, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.res, e.expires, true
}

// put stores r until expires, evicting the least recently used entry when
// full.
func (c *cache) put(k cacheKey, r *result, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.res, e.expires = r, expires
		c.unlink(e)
		c.pushFront(e)
		return
	}
	for len(c.m) >= c.max && c.head.prev != &c.head {
		c.remove(c.head.prev)
	}
	e := &cacheEntry{key: k, res: r, expires: expires}
	c.m[k] = e
	c.pushFront(e)
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *cache) remove(e *cacheEntry) {
	c.unlink(e)
	delete(c.m, e.key)
}

func (c *cache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *cache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

// flight is one upstream lookup that concurrent misses for the same key
// wait on instead of asking upstream again.
type flight struct {
	done chan struct{}
	res  *result
	exp  time.Time
	err  error
}
