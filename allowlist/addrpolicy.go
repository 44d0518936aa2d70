package allowlist

import (
	"errors"
	"fmt"
	"net/netip"
)

// AddrPolicyOptions configures an AddrPolicy. The zero value blocks every
// non-public address.
type AddrPolicyOptions struct {
	// AllowCIDRs reopens blocked ranges (private, link-local, metadata, ...)
	// for the addresses they contain. A range that overlaps loopback or
	// ::/96 is refused by NewAddrPolicy. If empty, nothing is reopened.
	AllowCIDRs []netip.Prefix
	// Own lists the gateway's own listening and interface addresses. They
	// are always blocked, even when public or inside AllowCIDRs, so the
	// sandbox cannot loop the gateway into itself or reach its admin API.
	Own []netip.Addr
	// Exempt lists exact address+port pairs that bypass every check. It
	// exists for tests (--test-allow-upstream 127.0.0.1:PORT) and opens
	// nothing else: not another port, not another address. If empty,
	// nothing is exempt.
	Exempt []netip.AddrPort
}

// AddrPolicy decides whether the gateway may dial an address. It is
// immutable after NewAddrPolicy and safe for concurrent use.
type AddrPolicy struct {
	allow  []netip.Prefix
	own    []netip.Addr
	exempt []netip.AddrPort
}

// BlockedError is the error of a refused address. Check leaves Host empty;
// a caller that judged a host name's answers sets it, and the text then
// names the host too.
type BlockedError struct {
	// Host is the host name or IP literal asked for, or empty.
	Host string
	// Addr is the refused address. It is invalid when Host is refused for
	// its name alone (localhost), before any lookup.
	Addr  netip.Addr
	Class Class
}

func (e *BlockedError) Error() string {
	switch {
	case e.Host == "":
		return fmt.Sprintf("address %s is %s", e.Addr, e.Class)
	case !e.Addr.IsValid():
		return fmt.Sprintf("%s names %s", e.Host, e.Class.phrase())
	case e.Host != e.Addr.String():
		return fmt.Sprintf("%s resolves to %s, which is %s", e.Host, e.Addr, e.Class.phrase())
	}
	return fmt.Sprintf("%s is %s", e.Host, e.Class.phrase())
}

// phrase is the class as the object of "is": "a private address", "the
// gateway's own address".
func (c Class) phrase() string {
	if c == ClassOwn {
		return c.String()
	}
	return "a " + c.String() + " address"
}

// NewAddrPolicy checks and copies its options.
func NewAddrPolicy(o AddrPolicyOptions) (*AddrPolicy, error) {
	p := &AddrPolicy{}
	for _, c := range o.AllowCIDRs {
		if err := ValidateAllowCIDR(c); err != nil {
			return nil, err
		}
		p.allow = append(p.allow, unmapPrefix(c))
	}
	for _, a := range o.Own {
		if !a.IsValid() {
			return nil, errors.New("own address: invalid IP address")
		}
		p.own = append(p.own, plain(a))
	}
	for _, ap := range o.Exempt {
		if !ap.IsValid() || ap.Port() == 0 {
			return nil, fmt.Errorf("exempt upstream %s: needs an address and a non-zero port", ap)
		}
		p.exempt = append(p.exempt, netip.AddrPortFrom(plain(ap.Addr()), ap.Port()))
	}
	return p, nil
}

// ValidateAllowCIDR reports whether p may be used in AllowCIDRs, and if not,
// how to fix it. Loopback and ::/96 can never be reopened; a range that
// overlaps them is refused whole rather than silently trimmed, so the config
// says what it does.
func ValidateAllowCIDR(p netip.Prefix) error {
	if !p.IsValid() {
		return errors.New(`invalid CIDR; write an address and a prefix length, e.g. "10.20.0.0/16"`)
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("%q has bits set after the prefix length; did you mean %q?", p.String(), m.String())
	}
	u := unmapPrefix(p)
	switch {
	case u.Overlaps(netip.MustParsePrefix("127.0.0.0/8")):
		return fmt.Errorf(`%q would include loopback 127.0.0.0/8, which is never allowed; list the ranges you need, e.g. "10.20.0.0/16"`, p.String())
	case u.Overlaps(netip.MustParsePrefix("::/96")):
		// ::/96 holds ::1 and ::, and the rest of it is the deprecated
		// IPv4-compatible form that some stacks route as IPv4.
		return fmt.Errorf(`%q would include loopback ::1 and the IPv4-compatible range ::/96, which are never allowed; list the ranges you need, e.g. "fd00:1234::/32"`, p.String())
	}
	return nil
}

// Check decides one dial target. Its order is the contract:
//  1. an exact Exempt address+port is allowed, whatever it is;
//  2. loopback, IPv4-compatible, invalid and Own addresses are blocked;
//  3. public addresses are allowed;
//  4. every other class is blocked unless an AllowCIDR contains the address.
//
// Addresses are compared unmapped and without zone, so ::ffff:10.0.0.1
// is 10.0.0.1 everywhere. The returned class is the address's class (ClassOwn
// for an Own address); the error, when blocked, is a *BlockedError.
// Check does not allocate when it allows.
func (p *AddrPolicy) Check(ap netip.AddrPort) (Class, error) {
	a := plain(ap.Addr())
	class := Classify(a)
	if p == nil {
		p = &AddrPolicy{}
	}
	for _, e := range p.exempt {
		if e.Addr() == a && e.Port() == ap.Port() {
			return class, nil
		}
	}
	switch class {
	case ClassLoopback, ClassIPv4Compatible, ClassInvalid:
		return class, &BlockedError{Addr: a, Class: class}
	}
	// Own addresses after the always-blocked classes, so that 127.0.0.1 is
	// reported as loopback, the more telling reason.
	for _, o := range p.own {
		if o == a {
			return ClassOwn, &BlockedError{Addr: a, Class: ClassOwn}
		}
	}
	if class == ClassPublic {
		return class, nil
	}
	for _, c := range p.allow {
		if c.Contains(a) {
			return class, nil
		}
	}
	return class, &BlockedError{Addr: a, Class: class}
}

// plain is a with IPv4-mapped IPv6 unmapped and any zone dropped: the form
// every comparison in this file uses.
func plain(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96), since
// Check compares unmapped addresses and an IPv6 prefix never contains an
// IPv4 address.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}
