package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) that holds all our rules.
const TableName = "hookgate"

// Chain names in TableName.
const (
	natChain    = "nat-output"
	filterChain = "filter-output"
)

// Rule tags (nftables rule user data), to find the counters again.
const (
	tagRedirectTCP = "hookgate:redirect-tcp"
	tagRedirectDNS = "hookgate:redirect-dns"
	tagDrop        = "hookgate:drop"
)

// Redirect says where the namespace's traffic goes.
type Redirect struct {
	// TCPPort is the transparent listener's port on loopback: every TCP
	// connection (other than DNS) is redirected to it. Required.
	TCPPort uint16
	// DNSPort is the DNS listener's port (UDP and TCP) on loopback: UDP and
	// TCP to port 53 are redirected to it. If zero, DNS is treated like
	// the rest: TCP to the transparent listener, UDP dropped.
	DNSPort uint16
	// ExemptMark, if not zero, exempts packets carrying this mark (SO_MARK)
	// from both redirection and dropping: the gateway's own sockets in
	// shared-namespace mode.
	ExemptMark uint32
	// LocalLoopback leaves TCP to loopback (127.0.0.0/8, ::1) alone instead
	// of redirecting it, so that servers the namespace's own processes
	// start on loopback (test suites, dev servers) are reachable. Only for
	// a namespace of its own (sandbox exec): there loopback never leaves
	// it. Never in shared-namespace mode, where loopback is the gateway's
	// (its explicit proxy, its admin API). DNS to loopback port 53 is
	// still redirected to DNSPort.
	LocalLoopback bool
	// KeepRedirecting lists loopback addresses and ports that are still
	// redirected with LocalLoopback: upstreams on the gateway's own
	// loopback that tests exempt from the address policy
	// (--test-allow-upstream), which the sandbox reaches through the
	// gateway by their address.
	KeepRedirecting []netip.AddrPort
}

// Counters are the packet counters of the table's rules.
type Counters struct {
	RedirectedTCP uint64 // new TCP connections sent to the transparent listener
	RedirectedDNS uint64 // new DNS flows (UDP and TCP) sent to the DNS listener
	Dropped       uint64 // packets dropped by the filter chain
}

// InstallRedirect installs the table TableName in the namespace of the
// calling OS thread (normally the process's own: shared-namespace mode, for
// containers that join it), exempting sockets that carry r.ExemptMark. A
// table of that name left over by an earlier run that crashed is replaced,
// in the same atomic transaction. remove deletes the table; it may be called
// from any goroutine, more than once.
func InstallRedirect(r Redirect) (remove func() error, err error) {
	ns, err := vnetns.Get()
	if err != nil {
		return nil, fmt.Errorf("opening the current network namespace: %w", err)
	}
	if err := install(int(ns), r); err != nil {
		_ = ns.Close()
		return nil, err
	}
	var done bool
	remove = func() error {
		if done {
			return nil
		}
		done = true
		defer ns.Close()
		return deleteTable(int(ns))
	}
	return remove, nil
}

// TableExists reports whether the table TableName exists in the namespace of
// the calling OS thread (for tests and diagnostics).
func TableExists() (bool, error) {
	ns, err := vnetns.Get()
	if err != nil {
		return false, fmt.Errorf("opening the current network namespace: %w", err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return false, err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, classify("listing nftables tables", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			return true, nil
		}
	}
	return false, nil
}

func (r Redirect) validate() error {
	if r.TCPPort == 0 {
		return errors.New("redirect: TCPPort is required")
	}
	if r.DNSPort == r.TCPPort {
		return errors.New("redirect: DNSPort must differ from TCPPort")
	}
	return nil
}

// install (re)creates the table in the namespace nsFD, in one transaction:
// add table (a no-op if it exists), delete it (with whatever it held), then
// build it anew.
func install(nsFD int, r Redirect) error {
	if err := r.validate(); err != nil {
		return err
	}
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return classify("nftables", err)
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	t = c.AddTable(t)

	accept := nftables.ChainPolicyAccept
	// One before the usual dstnat priority (-100), so that our redirect is
	// decided before other NAT rules at that priority — such as Docker's
	// DNAT of its embedded resolver 127.0.0.11 in a shared container
	// namespace, which would otherwise take the sandbox's DNS around the
	// gateway. The gateway's own (marked) lookups still reach it.
	natPriority := *nftables.ChainPriorityNATDest - 1
	nat := c.AddChain(&nftables.Chain{
		Name: natChain, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(natPriority),
		Policy: &accept,
	})
	drop := nftables.ChainPolicyDrop
	filter := c.AddChain(&nftables.Chain{
		Name: filterChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter,
		Policy: &drop,
	})
	for _, rule := range natRules(r) {
		rule.Table, rule.Chain = t, nat
		c.AddRule(rule)
	}
	for _, rule := range filterRules(r) {
		rule.Table, rule.Chain = t, filter
		c.AddRule(rule)
	}
	if err := c.Flush(); err != nil {
		return classifyNFT(err)
	}
	return nil
}

func deleteTable(nsFD int) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return classify("nftables", err)
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	c.AddTable(t) // so that deleting an already deleted table is no error
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return classify("removing nftables table "+TableName, err)
	}
	return nil
}

func readCounters(nsFD int) (Counters, error) {
	var out Counters
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return out, classify("nftables", err)
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	for _, chain := range []string{natChain, filterChain} {
		rules, err := c.GetRules(t, &nftables.Chain{Name: chain, Table: t})
		if err != nil {
			return out, classify("reading nftables rules", err)
		}
		for _, rule := range rules {
			var n uint64
			for _, e := range rule.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					n = ctr.Packets
				}
			}
			switch string(rule.UserData) {
			case tagRedirectTCP:
				out.RedirectedTCP += n
			case tagRedirectDNS:
				out.RedirectedDNS += n
			case tagDrop:
				out.Dropped += n
			}
		}
	}
	return out, nil
}

// classifyNFT explains a failed nftables transaction.
func classifyNFT(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return &PrivilegeError{Op: "installing nftables rules", Err: err}
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP),
		errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EPROTONOSUPPORT),
		errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("the kernel lacks nftables NAT support (nf_tables, inet nat chains, redir, ct): %w: %w", ErrKernel, err)
	}
	return fmt.Errorf("installing nftables rules: %w", err)
}

// natRules: exempt the mark; leave connections to the listeners themselves
// alone; DNS to the DNS listener; TCP to loopback alone if asked; all other
// TCP to the transparent listener.
func natRules(r Redirect) []*nftables.Rule {
	var rules []*nftables.Rule
	if r.ExemptMark != 0 {
		rules = append(rules, rule("", markIs(r.ExemptMark), accept()))
	}
	for _, port := range []uint16{r.TCPPort, r.DNSPort} {
		if port == 0 {
			continue
		}
		rules = append(rules,
			rule("", l4(unix.IPPROTO_TCP), loopback4(), dport(port), accept()),
			rule("", l4(unix.IPPROTO_TCP), loopback6(), dport(port), accept()))
	}
	if r.DNSPort != 0 {
		rules = append(rules,
			rule(tagRedirectDNS, l4(unix.IPPROTO_UDP), dport(53), counter(), redirect(r.DNSPort)),
			rule(tagRedirectDNS, l4(unix.IPPROTO_TCP), dport(53), counter(), redirect(r.DNSPort)))
	}
	if r.LocalLoopback {
		for _, ap := range r.KeepRedirecting {
			rules = append(rules, rule(tagRedirectTCP, l4(unix.IPPROTO_TCP), daddrIs(ap.Addr()), dport(ap.Port()), counter(), redirect(r.TCPPort)))
		}
		rules = append(rules,
			rule("", l4(unix.IPPROTO_TCP), loopback4(), accept()),
			rule("", l4(unix.IPPROTO_TCP), loopback6(), accept()))
	}
	rules = append(rules, rule(tagRedirectTCP, l4(unix.IPPROTO_TCP), counter(), redirect(r.TCPPort)))
	return rules
}

// filterRules: exempt the mark; established and related; anything to
// loopback (after the nat hook, redirected traffic is); IPv6 neighbour
// discovery and MLD, which must work on every link of a shared namespace;
// drop the rest, counted.
func filterRules(r Redirect) []*nftables.Rule {
	var rules []*nftables.Rule
	if r.ExemptMark != 0 {
		rules = append(rules, rule("", markIs(r.ExemptMark), accept()))
	}
	rules = append(rules,
		rule("", ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept()),
		rule("", loopback4(), accept()),
		rule("", loopback6(), accept()),
		// ICMPv6 133-136: router and neighbour solicitation/advertisement.
		rule("", l4(unix.IPPROTO_ICMPV6), icmp6TypeRange(133, 136), accept()),
		// ICMPv6 143: MLDv2 report.
		rule("", l4(unix.IPPROTO_ICMPV6), icmp6TypeRange(143, 143), accept()),
		rule(tagDrop, counter(), verdict(expr.VerdictDrop)),
	)
	return rules
}

// Expression builders. Everything goes through register 1.

func rule(tag string, parts ...[]expr.Any) *nftables.Rule {
	r := &nftables.Rule{}
	if tag != "" {
		r.UserData = []byte(tag)
	}
	for _, p := range parts {
		r.Exprs = append(r.Exprs, p...)
	}
	return r
}

func cmpEq(data []byte) expr.Any { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data} }

func l4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmpEq([]byte{proto})}
}

func nfproto(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, cmpEq([]byte{proto})}
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		cmpEq(be16(port)),
	}
}

// loopback4 matches IPv4 packets to 127.0.0.0/8.
func loopback4() []expr.Any {
	return append(nfproto(unix.NFPROTO_IPV4),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		cmpEq([]byte{127, 0, 0, 0}))
}

// loopback6 matches IPv6 packets to ::1.
func loopback6() []expr.Any {
	return append(nfproto(unix.NFPROTO_IPV6),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		cmpEq(net.IPv6loopback))
}

// daddrIs matches packets to exactly a (IPv4 or IPv6).
func daddrIs(a netip.Addr) []expr.Any {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return append(nfproto(unix.NFPROTO_IPV4),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			cmpEq(b[:]))
	}
	b := a.As16()
	return append(nfproto(unix.NFPROTO_IPV6),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		cmpEq(b[:]))
}

func icmp6TypeRange(lo, hi byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{lo}},
		&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: []byte{hi}},
	}
}

func markIs(mark uint32) []expr.Any {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, mark) // meta values are in host order
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, cmpEq(b)}
}

func ctState(bits uint32) []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, bits)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: be16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: expr.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

func counter() []expr.Any { return []expr.Any{&expr.Counter{}} }

func accept() []expr.Any { return verdict(expr.VerdictAccept) }

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
