package config

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/hookgate/hookgate/allowlist"
)

// Policy is one generation of the egress rules, compiled from a Config
// (Config.Policy): which names may be reached, which addresses may be
// dialled, what each allowlist entry adds, the upstream timeouts, and how
// the sandbox's DNS server answers a denied name. It is immutable: a reload
// compiles a new one and swaps it in whole, the proxy, the transparent
// listener and the DNS server read the same value, and each request, tunnel
// or query keeps the one it started with.
type Policy struct {
	Allowlist *allowlist.Policy
	Addrs     *allowlist.AddrPolicy
	// Entries holds what each allowlist entry adds, by the entry's
	// position in the allowlist. It may be shorter than the allowlist (or
	// nil): missing entries add nothing.
	Entries []Entry
	// Timeouts bound the upstream side of the requests, tunnels and
	// lookups judged by this policy, so that a reload applies new ones to
	// new requests. A zero field keeps the server's own.
	Timeouts Timeouts
	// Sinkhole, if not empty, are the DNS server's answers for a denied
	// name (network.dns.denied: sinkhole): addresses of the gateway's
	// transparent listener, which Addrs never lets anything dial.
	Sinkhole []netip.Addr
	// Report is network.mode: report. What the allowlist denies is let
	// through as a host that matched no entry (JudgeUnlisted: nothing
	// injected, every address still judged) and logged as would-deny; the
	// DNS server answers such names too. Names of the loopback interface
	// stay refused.
	Report bool
	// Generation numbers this policy: the config generation it serves,
	// stamped by the runtime that swaps it in and named on the decision
	// lines it judges. 0: unnumbered.
	Generation uint64
	// Tenants, if not nil, are the sandboxes this generation tells apart,
	// each with its own policy; this Policy is then the one of clients no
	// tenant claims (unless Tenants.Required refuses them).
	Tenants *Tenants

	// none is the entry of a match beyond Entries: it adds nothing.
	none Entry
}

// SetGeneration numbers p and every tenant's policy in it with the config
// generation n they serve, so that each decision line names the generation
// of the policy that judged it, whoever the client was.
func (p *Policy) SetGeneration(n uint64) {
	p.Generation = n
	for _, t := range p.Tenants.List() {
		t.Policy.Generation = n
	}
}

// PolicyOptions are what a Policy needs beyond the config file: facts of
// the host the gateway runs on.
type PolicyOptions struct {
	// Own are the gateway's own addresses, never dialled.
	Own []netip.Addr
	// Exempt upstreams may be dialled whatever their address class.
	Exempt []netip.AddrPort
	// Sinkhole are the DNS server's answers for denied names when the
	// config asks for them (DNSDeniedSinkhole); ignored otherwise.
	Sinkhole []netip.Addr
}

// Policy compiles the rules of c, on a host described by o.
func (c *Config) Policy(o PolicyOptions) (*Policy, error) {
	p := &Policy{Allowlist: c.Allowlist, Entries: c.Entries, Timeouts: c.Timeouts, Report: c.Reporting()}
	own := o.Own
	if c.DNSDenied == DNSDeniedSinkhole {
		// Never dialled, whatever allow_cidrs says: a connection to them
		// that names no host is refused like one to the gateway itself.
		own = append(slices.Clip(own), o.Sinkhole...)
		p.Sinkhole = o.Sinkhole
	}
	addrs, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{AllowCIDRs: c.AllowCIDRs, Own: own, Exempt: o.Exempt})
	if err != nil {
		return nil, err
	}
	p.Addrs = addrs
	if p.Tenants, err = c.tenantPolicies(o); err != nil {
		return nil, err
	}
	return p, nil
}

// HasTransforms reports whether any entry injects credentials (and so the
// gateway needs its CA to intercept TLS with).
func (p *Policy) HasTransforms() bool {
	if hasTransforms(p.Entries) {
		return true
	}
	for _, t := range p.Tenants.List() {
		if t.Policy.HasTransforms() {
			return true
		}
	}
	return false
}

// Verdict is what a Policy says of a host name.
type Verdict struct {
	Allowed bool
	// Pattern is the allowlist pattern that matched ("api.x.com",
	// "*.x.com", "*"); "" when no entry did.
	Pattern string
	// Entry is what the matched entry adds (transform, pins, timeouts):
	// one of the policy's own entries, never nil when an entry matched.
	Entry *Entry
}

// NotAllowedError reports a host that no allowlist entry matches.
type NotAllowedError struct{ Host string }

func (e *NotAllowedError) Error() string { return e.Host + " is not on the allowlist" }

// LocalhostError reports a name that means the loopback interface whatever
// it resolves to.
type LocalhostError struct{ Host string }

func (e *LocalhostError) Error() string { return e.Host + " names the loopback interface" }

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

// Judge decides a host (normalised by allowlist.NormalizeHost; ip is valid
// when it is an IP literal) and the addresses it resolves to: the allowlist
// first, so that a denied name is never looked up; then names that are
// loopback whatever they resolve to; then, for a name, lookup's answer (an
// IP literal is its own address); then every address, against the address
// policy and the matched entry's pins. The verdict names the matched entry
// even when an address is refused. lookup is not called when the name is
// refused or is an IP literal; a nil lookup judges the name alone (and an
// IP literal's address), leaving a name's addresses to its dial, and
// returns no addresses.
//
// The proxy (explicit and transparent) and the DNS server judge through
// this one function; the proxy judges the addresses again on every dial
// (CheckAddrs), since a pooled name may be dialled long after.
func (p *Policy) Judge(ctx context.Context, host string, ip netip.Addr, port uint16, lookup func(context.Context, string) ([]netip.Addr, error)) (Verdict, []netip.Addr, error) {
	v := p.Decide(host)
	if !v.Allowed {
		return v, nil, &NotAllowedError{Host: host}
	}
	if !v.Entry.PortAllowed(port) {
		return v, nil, &PortError{Host: host, Port: port}
	}
	addrs, err := p.judgeAddrs(ctx, v.Entry, host, ip, port, lookup)
	return v, addrs, err
}

// JudgeUnlisted judges a host as one that matched no allowlist entry,
// whatever the allowlist says: Judge from the allowlist on, with no
// entry (no transform, no pins). It is what report mode lets through in
// place of a *NotAllowedError; the verdict is not Allowed, its Entry adds
// nothing.
func (p *Policy) JudgeUnlisted(ctx context.Context, host string, ip netip.Addr, port uint16, lookup func(context.Context, string) ([]netip.Addr, error)) (Verdict, []netip.Addr, error) {
	v := Verdict{Entry: &p.none}
	addrs, err := p.judgeAddrs(ctx, v.Entry, host, ip, port, lookup)
	return v, addrs, err
}

// judgeAddrs is Judge past the allowlist, for the entry e the host matched.
func (p *Policy) judgeAddrs(ctx context.Context, e *Entry, host string, ip netip.Addr, port uint16, lookup func(context.Context, string) ([]netip.Addr, error)) ([]netip.Addr, error) {
	if !ip.IsValid() && allowlist.IsLocalhostName(host) {
		return nil, &LocalhostError{Host: host}
	}
	if ip.IsValid() {
		one := [1]netip.Addr{ip}
		if err := p.CheckAddrs(e, host, port, one[:]); err != nil || lookup == nil {
			return nil, err
		}
		return []netip.Addr{ip}, nil
	}
	if lookup == nil {
		return nil, nil
	}
	addrs, err := lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	return addrs, p.CheckAddrs(e, host, port, addrs)
}

// Decide matches a normalised host against the allowlist. A nil Policy
// allows nothing.
func (p *Policy) Decide(host string) Verdict {
	if p == nil {
		return Verdict{}
	}
	av := p.Allowlist.Decide(host)
	if !av.Allowed {
		return Verdict{}
	}
	v := Verdict{Allowed: true, Pattern: av.Entry.Domain, Entry: &p.none}
	if i := av.Entry.Index; i < len(p.Entries) {
		v.Entry = &p.Entries[i]
	}
	return v
}

// CheckAddrs judges the addresses host resolved to, for a connection to
// port: each against the address policy, then against the pins of e (nil
// for none). One refused address refuses them all, so that a mixed answer
// cannot sneak a private address past a client that tries them in turn.
// The error is an *allowlist.BlockedError or a *PinnedError. A nil Policy (or
// Addrs) lets only public addresses through.
func (p *Policy) CheckAddrs(e *Entry, host string, port uint16, addrs []netip.Addr) error {
	var policy *allowlist.AddrPolicy
	if p != nil {
		policy = p.Addrs
	}
	for _, a := range addrs {
		if class, err := policy.Check(netip.AddrPortFrom(a, port)); err != nil {
			return &allowlist.BlockedError{Host: host, Addr: a, Class: class}
		}
		if !e.pinned(a) {
			return &PinnedError{Host: host, Addr: a}
		}
	}
	return nil
}

// pinned reports whether a is inside the entry's pins (or it has none).
func (e *Entry) pinned(a netip.Addr) bool {
	if e == nil || len(e.Addresses) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range e.Addresses {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
