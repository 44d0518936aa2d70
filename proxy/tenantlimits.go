package proxy

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookgate/hookgate/config"
)

// Codes of the per-tenant limits (tenants[].limits).
const (
	// CodeTenantConnections: the tenant holds its maximum of open tunnels
	// and forwarded requests.
	CodeTenantConnections Code = "tenant-too-many-connections"
	// CodeTenantRate: the tenant's requests-per-second bucket is empty.
	CodeTenantRate Code = "tenant-rate-limited"
	// CodeTenantVolume: the tenant moved its bytes-per-minute already.
	CodeTenantVolume Code = "tenant-volume-exceeded"
)

// tenantLimiter keeps what each tenant uses of the gateway, by name, so
// that a reload (which changes the limits) keeps the counts. Names come
// from the config, which bounds the map.
type tenantLimiter struct {
	mu sync.Mutex
	m  map[string]*tenantUse
	// clock is time.Now, or a test's.
	clock func() time.Time
}

func (tl *tenantLimiter) now() time.Time {
	if tl.clock != nil {
		return tl.clock()
	}
	return time.Now()
}

type tenantUse struct {
	conns  int
	tokens float64 // the request bucket
	last   time.Time
	window time.Time // the minute bytes counts
	bytes  int64
}

// tenantAccount is what a decision of a tenant with limits carries: where
// its bytes are counted and what its end gives back.
type tenantAccount struct {
	tl     *tenantLimiter
	tenant string
	limits config.TenantLimits
}

func (tl *tenantLimiter) use(tenant string) *tenantUse {
	if tl.m == nil {
		tl.m = make(map[string]*tenantUse)
	}
	u, ok := tl.m[tenant]
	if !ok {
		u = &tenantUse{}
		tl.m[tenant] = u
	}
	return u
}

// admit checks a new request or tunnel of a tenant against its limits —
// volume, then rate, then (when conn) open connections — and counts it.
// A conn admitted must be released.
func (tl *tenantLimiter) admit(tenant string, l config.TenantLimits, conn bool, now time.Time) *denial {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	u := tl.use(tenant)
	if l.BytesPerMinute > 0 {
		u.roll(now)
		if u.bytes >= l.BytesPerMinute {
			return deny(CodeTenantVolume, http.StatusTooManyRequests, "",
				"tenant %s moved its %d bytes for this minute; retry in the next", tenant, l.BytesPerMinute)
		}
	}
	if l.RequestsPerSecond > 0 {
		if u.last.IsZero() {
			u.tokens = float64(l.Burst)
		} else {
			u.tokens = min(float64(l.Burst), u.tokens+now.Sub(u.last).Seconds()*l.RequestsPerSecond)
		}
		u.last = now
		if u.tokens < 1 {
			return deny(CodeTenantRate, http.StatusTooManyRequests, "",
				"tenant %s is over its %g requests per second; retry shortly", tenant, l.RequestsPerSecond)
		}
	}
	if conn && l.MaxConnections > 0 && u.conns >= l.MaxConnections {
		return deny(CodeTenantConnections, http.StatusTooManyRequests, "",
			"tenant %s holds its maximum of %d connections; close some or retry later", tenant, l.MaxConnections)
	}
	if l.RequestsPerSecond > 0 {
		u.tokens--
	}
	if conn {
		u.conns++
	}
	return nil
}

// roll starts a new minute of bytes when the last one is over.
func (u *tenantUse) roll(now time.Time) {
	if w := now.Truncate(time.Minute); !w.Equal(u.window) {
		u.window, u.bytes = w, 0
	}
}

func (tl *tenantLimiter) release(tenant string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if u := tl.use(tenant); u.conns > 0 {
		u.conns--
	}
}

// addBytes counts bytes a tenant moved.
func (a *tenantAccount) addBytes(n int64) {
	if a == nil || a.limits.BytesPerMinute <= 0 || n <= 0 {
		return
	}
	a.tl.mu.Lock()
	u := a.tl.use(a.tenant)
	u.roll(a.tl.now())
	u.bytes += n
	a.tl.mu.Unlock()
}

// admitTenant applies the limits of an identified tenant to a new
// decision (conn: it holds a connection until it finishes) and ties its
// bytes to the tenant's count. Clients of no tenant, and tenants without
// limits, pass.
func (s *Server) admitTenant(d *decision, id identity, conn bool) *denial {
	if id.tenant == "" || id.limits == (config.TenantLimits{}) {
		return nil
	}
	if den := s.tenantUse.admit(id.tenant, id.limits, conn, s.tenantUse.now()); den != nil {
		if s.sink.observer.Limited != nil {
			s.sink.observer.Limited(den.code)
		}
		return den
	}
	d.account = &tenantAccount{tl: &s.tenantUse, tenant: id.tenant, limits: id.limits}
	if conn && id.limits.MaxConnections > 0 {
		d.holdsConn = true
	}
	return nil
}

// errVolume ends a tunnel direction of a tenant over its bytes per minute.
var errVolume = errors.New("the tenant's bytes per minute are spent")

// over reports whether the tenant's bytes of this minute, with pending
// bytes not yet counted, reach its cap.
func (a *tenantAccount) over(pending int64) bool {
	if a == nil || a.limits.BytesPerMinute <= 0 {
		return false
	}
	a.tl.mu.Lock()
	defer a.tl.mu.Unlock()
	u := a.tl.use(a.tenant)
	u.roll(a.tl.now())
	return u.bytes+pending > a.limits.BytesPerMinute
}

// volumeConn is one side of a tenant's opaque tunnel, as the relay writes
// to it: a write that would take the tenant past its bytes per minute (the
// minute's count plus what this tunnel moved so far, which is counted when
// it ends) fails, which ends that direction, and the tunnel's line says
// why. Bytes are never cut short of the cap by more than one write.
type volumeConn struct {
	net.Conn
	d     *decision
	moved *atomic.Int64 // this tunnel's bytes so far, both ways
}

func (c *volumeConn) Write(p []byte) (int, error) {
	if c.d.account.over(c.moved.Load() + int64(len(p))) {
		c.d.fail(deny(CodeTenantVolume, 0, c.d.host, "tenant %s moved its %d bytes for this minute; the tunnel was cut", c.d.account.tenant, c.d.account.limits.BytesPerMinute))
		return 0, errVolume
	}
	n, err := c.Conn.Write(p)
	c.moved.Add(int64(n))
	return n, err
}

// NetConn keeps the layers walkable (half-close, socket options).
func (c *volumeConn) NetConn() net.Conn { return c.Conn }

// volumeGuarded are the two ends of a tunnel as its relay writes to them:
// wrapped in volumeConn for a tenant with a volume cap, else as they are.
func volumeGuarded(d *decision, client, upstream net.Conn) (net.Conn, net.Conn) {
	if d.account == nil || d.account.limits.BytesPerMinute <= 0 {
		return client, upstream
	}
	moved := new(atomic.Int64)
	return &volumeConn{Conn: client, d: d, moved: moved}, &volumeConn{Conn: upstream, d: d, moved: moved}
}
