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
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/resolve"
)

// Guard is the one dialer every upstream connection goes through: plain HTTP,
// CONNECT tunnels and intercepted requests. It resolves a name, judges every
// address the name resolves to by the policy and entry the request was
// judged by (config.Policy.CheckAddrs), and dials only addresses it judged;
// it never looks the name up a second time between the check and the dial,
// so DNS rebinding has no window.
type Guard struct {
	// Resolver resolves names. If nil, net.DefaultResolver is used.
	Resolver resolve.Resolver
	// Policy judges each address. It must not be nil.
	Policy *config.Policy
	// Entry is the allowlist entry the host matched; its addresses, if
	// any, narrow the policy's, never widen them. Nil: no pins.
	Entry *config.Entry
	// ResolveTimeout bounds one lookup. If zero, 5s.
	ResolveTimeout time.Duration
	// DialTimeout bounds one TCP connect. If zero, 10s.
	DialTimeout time.Duration
	// Control, if set, is applied to every dialled socket (SO_MARK for the
	// transparent mode's redirect rules, for example).
	Control func(network, address string, c syscall.RawConn) error
}

// Target is a destination that passed the guard: the name that was allowed,
// and the addresses it resolved to, every one of which was judged.
type Target struct {
	Host  string // normalised host name or IP literal
	Port  uint16
	Addrs []netip.Addr
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
	t := Target{Host: host, Port: port, Addrs: []netip.Addr{ip}}
	if !ip.IsValid() {
		if allowlist.IsLocalhostName(host) {
			return Target{}, &config.LocalhostError{Host: host}
		}
		addrs, err := g.lookup(ctx, host)
		if err != nil {
			return Target{}, err
		}
		t.Addrs = addrs
	}
	if err := g.Policy.CheckAddrs(g.Entry, host, port, t.Addrs); err != nil {
		return Target{}, err
	}
	return t, nil
}

// lookup resolves a name within the resolve timeout; an answer without
// addresses is an error.
func (g *Guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, durationOr(g.ResolveTimeout, 5*time.Second))
	addrs, err := g.resolver().LookupNetIP(ctx, "ip", host)
	cancel()
	if err != nil {
		return nil, &ResolveError{Host: host, Err: err}
	}
	if len(addrs) == 0 {
		return nil, &ResolveError{Host: host, Err: errNoAddresses}
	}
	return addrs, nil
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
