package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/internal/resolve"
)

// Guard is the one dialer every upstream connection goes through: plain HTTP,
// CONNECT tunnels and (later) MITM. It resolves a name, judges every address
// the name resolves to, and dials only addresses it judged; it never looks the
// name up a second time between the check and the dial, so DNS rebinding has
// no window.
type Guard struct {
	// Resolver resolves names. If nil, net.DefaultResolver is used.
	Resolver resolve.Resolver
	// Addrs judges each address. It must not be nil.
	Addrs *allowlist.AddrPolicy
	// ResolveTimeout bounds one lookup. If zero, 5s.
	ResolveTimeout time.Duration
	// DialTimeout bounds one TCP connect. If zero, 10s.
	DialTimeout time.Duration
	// Control, if set, is applied to every dialled socket (SO_MARK for the
	// transparent mode's redirect rules, for example).
	Control func(network, address string, c syscall.RawConn) error
	// Pins, if not empty, are the only ranges a name may resolve into (an
	// allowlist entry's addresses). They narrow Addrs, never widen it.
	Pins []netip.Prefix
}

// Target is a destination that passed the guard: the name that was allowed,
// and the addresses it resolved to, every one of which was judged.
type Target struct {
	Host  string // normalised host name or IP literal
	Port  uint16
	Addrs []netip.Addr
}

// PinnedError reports that a host resolved to (or is) an address outside
// the ranges its allowlist entry pins.
type PinnedError struct {
	Host string
	Addr netip.Addr
}

func (e *PinnedError) Error() string {
	if e.Host == e.Addr.String() {
		return fmt.Sprintf("%s is outside the addresses its allowlist entry allows", e.Host)
	}
	return fmt.Sprintf("%s resolves to %s, outside the addresses its allowlist entry allows", e.Host, e.Addr)
}

// errNoAddresses: a lookup that succeeded with an empty answer.
var errNoAddresses = errors.New("no addresses")

// ResolveError reports that a name could not be resolved.
type ResolveError struct {
	Host string
	Err  error
}

func (e *ResolveError) Error() string {
	var dnsErr *net.DNSError
	if errors.As(e.Err, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Sprintf("%s: no such host", e.Host)
	}
	return fmt.Sprintf("resolving %s: %v", e.Host, e.Err)
}

func (e *ResolveError) Unwrap() error { return e.Err }

// Resolve turns an allowed host into a Target: IP literals are judged as they
// are, names are resolved and every answer is judged. If any answer is
// blocked the whole name is refused, so a mixed answer cannot be used to
// sneak a private address past a client that tries addresses in turn.
func (g *Guard) Resolve(ctx context.Context, host string, ip netip.Addr, port uint16) (Target, error) {
	t := Target{Host: host, Port: port}
	if ip.IsValid() {
		t.Addrs = []netip.Addr{ip}
	} else {
		if allowlist.IsLocalhostName(host) {
			return Target{}, &allowlist.BlockedError{Host: host, Class: allowlist.ClassLoopback}
		}
		ctx, cancel := context.WithTimeout(ctx, durationOr(g.ResolveTimeout, 5*time.Second))
		addrs, err := g.resolver().LookupNetIP(ctx, "ip", host)
		cancel()
		if err != nil {
			return Target{}, &ResolveError{Host: host, Err: err}
		}
		if len(addrs) == 0 {
			return Target{}, &ResolveError{Host: host, Err: errNoAddresses}
		}
		t.Addrs = addrs
	}
	for _, a := range t.Addrs {
		if class, err := g.Addrs.Check(netip.AddrPortFrom(a, port)); err != nil {
			return Target{}, &allowlist.BlockedError{Host: host, Addr: a, Class: class}
		}
		if !g.pinned(a) {
			return Target{}, &PinnedError{Host: host, Addr: a}
		}
	}
	return t, nil
}

// pinned reports whether a is inside the guard's pins (or there are none).
func (g *Guard) pinned(a netip.Addr) bool {
	if len(g.Pins) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range g.Pins {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Dial connects to one of the target's judged addresses, in the resolver's
// order, and returns the first connection that succeeds.
func (g *Guard) Dial(ctx context.Context, t Target) (net.Conn, error) {
	d := net.Dialer{Timeout: durationOr(g.DialTimeout, 10*time.Second), KeepAlive: 30 * time.Second}
	d.Control = g.Control
	var firstErr error
	for _, a := range t.Addrs {
		conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, t.Port).String())
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// DialContext is the http.Transport dial hook: addr is host:port of a request
// that already passed the allowlist. It resolves, judges and dials.
func (g *Guard) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	hostPart, portPart, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portPart, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", portPart)
	}
	host, ip, err := allowlist.NormalizeHost(hostPart)
	if err != nil {
		return nil, err
	}
	t, err := g.Resolve(ctx, host, ip, uint16(port))
	if err != nil {
		return nil, err
	}
	return g.Dial(ctx, t)
}

func (g *Guard) resolver() resolve.Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
