package proxy

import (
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// NameMemory tells which names the gateway's own DNS server answered to a
// sandbox client with an address. Transparent mode asks it for a redirected
// connection that is neither TLS nor HTTP, whose only other clue is the
// address it was aimed at (see serveTransparentRaw).
type NameMemory interface {
	// Names are the names answered to client with addr, still within
	// their TTL; nil for none.
	Names(client, addr netip.Addr) []string
}

// DNS memory bounds and slack.
const (
	// DefaultResolvedNamesSize bounds a ResolvedNames in (client, address)
	// pairs when NewResolvedNames is given no size.
	DefaultResolvedNamesSize = 16384
	// ResolvedNamesGrace is added to an answer's TTL: a client that
	// resolved a name connects a moment later, and may have cached the
	// answer up to its last second.
	ResolvedNamesGrace = 10 * time.Second
	// maxNamesPerAddr bounds the names kept for one (client, address)
	// pair (many names may share one address); the oldest goes first.
	maxNamesPerAddr = 8
)

// ResolvedNames is the NameMemory the gateway fills from its DNS server's
// answers: a bounded LRU of (client, answered address) to the names
// answered, each until its TTL plus ResolvedNamesGrace. It is safe for
// concurrent use.
type ResolvedNames struct {
	mu    sync.Mutex // serialises read-modify-write of one pair's names
	cache *lru.Cache[resolvedKey, []resolvedName]
	now   func() time.Time
}

type resolvedKey struct{ client, addr netip.Addr }

type resolvedName struct {
	name  string
	until time.Time
}

// NewResolvedNames returns an empty memory of at most size pairs
// (DefaultResolvedNamesSize when size <= 0); the least recently used pair
// is forgotten first.
func NewResolvedNames(size int) *ResolvedNames {
	if size <= 0 {
		size = DefaultResolvedNamesSize
	}
	c, _ := lru.New[resolvedKey, []resolvedName](size) // errors only for size <= 0
	return &ResolvedNames{cache: c, now: time.Now}
}

// Remember records that name was answered to client with addrs, valid for
// ttl. Only answers of the gateway's own DNS server to that client belong
// here: a name remembered is what a raw tunnel is judged and logged by.
func (r *ResolvedNames) Remember(client netip.Addr, name string, addrs []netip.Addr, ttl time.Duration) {
	if !client.IsValid() || name == "" {
		return
	}
	client = client.Unmap()
	until := r.now().Add(max(ttl, 0) + ResolvedNamesGrace)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range addrs {
		k := resolvedKey{client: client, addr: a.Unmap()}
		old, _ := r.cache.Peek(k)
		names := make([]resolvedName, 0, min(len(old)+1, maxNamesPerAddr))
		names = append(names, resolvedName{name: name, until: until})
		for _, n := range old {
			if n.name != name && len(names) < maxNamesPerAddr && n.until.After(r.now()) {
				names = append(names, n)
			}
		}
		r.cache.Add(k, names)
	}
}

// Names implements NameMemory: the names still valid, the most recently
// answered first.
func (r *ResolvedNames) Names(client, addr netip.Addr) []string {
	r.mu.Lock()
	names, ok := r.cache.Get(resolvedKey{client: client.Unmap(), addr: addr.Unmap()})
	r.mu.Unlock()
	if !ok {
		return nil
	}
	now := r.now()
	var out []string
	for _, n := range names {
		if n.until.After(now) {
			out = append(out, n.name)
		}
	}
	return out
}
