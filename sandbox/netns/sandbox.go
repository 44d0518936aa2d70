package netns

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LinkName is the link that carries the sandbox's default routes; LinkPeerName
// is its peer when it is a veth pair (kernels without dummy links).
const (
	LinkName     = "hg0"
	LinkPeerName = "hg1"
)

// The addresses of LinkName. They exist so that routing succeeds and
// packets reach the nat hook; no packet is ever sent from or to them.
var (
	LinkAddr4 = net.IPNet{IP: net.IPv4(169, 254, 77, 1).To4(), Mask: net.CIDRMask(32, 32)}
	LinkAddr6 = net.IPNet{IP: net.ParseIP("fd68:676b::1"), Mask: net.CIDRMask(128, 128)}
)

// ErrNeedsRoot is wrapped by the errors of operations refused for lack of
// privilege.
var ErrNeedsRoot = errors.New("needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")

// PrivilegeError is a step refused for lack of privilege. It matches
// ErrNeedsRoot (errors.Is).
type PrivilegeError struct {
	Op  string // what was refused, e.g. "creating a network namespace"
	Err error  // the system's error (EPERM, EACCES)
}

func (e *PrivilegeError) Error() string {
	return e.Op + ": " + ErrNeedsRoot.Error() + ": " + e.Err.Error()
}

// Is makes errors.Is(err, ErrNeedsRoot) true.
func (e *PrivilegeError) Is(target error) bool { return target == ErrNeedsRoot }

func (e *PrivilegeError) Unwrap() error { return e.Err }

// ErrKernel is wrapped by the errors that come from a kernel without a
// feature the sandbox needs (network namespaces, nftables NAT, ...).
var ErrKernel = errors.New("the kernel lacks a feature the sandbox needs")

// ErrClosed is returned by the methods of a closed Sandbox.
var ErrClosed = errors.New("sandbox network namespace already closed")

// Sandbox is an anonymous network namespace whose traffic the gateway
// handles. Create it with New, put the gateway's listeners in it with Listen
// and ListenPacket, install the rules with Redirect, run the sandboxed
// command with Start, and Close it when done.
//
// The namespace lives as long as anything refers to it: the Sandbox (until
// Close), a listener made in it, or a process in it. Nothing of it is
// visible in, or left behind in, the caller's namespace.
type Sandbox struct {
	mu   sync.RWMutex // write-held by Close; read-held while ns is used
	ns   vnetns.NsHandle
	ipv6 bool
	link string // "dummy" or "veth"
}

// New creates the namespace (unshare on a locked OS thread, which then goes
// back to its own namespace), brings lo up, and adds LinkName with
// LinkAddr4, LinkAddr6 and default routes for both families through it. If
// the kernel has IPv6 disabled, the sandbox is IPv4-only: IPv6 then has no
// route at all.
func New() (*Sandbox, error) {
	var ns vnetns.NsHandle
	err := onThread(func(orig vnetns.NsHandle) error {
		var err error
		ns, err = vnetns.New() // unshare(CLONE_NEWNET) for this thread only
		if err != nil {
			return classify("creating a network namespace", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s := &Sandbox{ns: ns}
	if err := s.setupLinks(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// IPv6 reports whether the sandbox has IPv6 (an address and a default
// route; its IPv6 connections are redirected like IPv4 ones).
func (s *Sandbox) IPv6() bool { return s.ipv6 }

// Inode is the namespace's inode number, as in /proc/PID/ns/net: a process
// is in the sandbox when its link shows net:[Inode]. Zero after Close.
func (s *Sandbox) Inode() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var st unix.Stat_t
	if s.ns == -1 || unix.Fstat(int(s.ns), &st) != nil {
		return 0
	}
	return st.Ino
}

// LinkKind is the kind of LinkName: "dummy", or "veth" on kernels without
// dummy links.
func (s *Sandbox) LinkKind() string { return s.link }

func (s *Sandbox) setupLinks() error {
	h, err := netlink.NewHandleAt(s.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return classify("netlink in the sandbox namespace", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return classify("finding lo", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return classify("bringing lo up", err)
	}

	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: LinkName}}
	if derr := h.LinkAdd(dummy); derr == nil {
		s.link = "dummy"
	} else {
		// No CONFIG_DUMMY: a veth pair with both ends inside does the same.
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: LinkName}, PeerName: LinkPeerName}
		if verr := h.LinkAdd(veth); verr != nil {
			return classify("adding link "+LinkName+" (dummy: "+derr.Error()+"; veth)", verr)
		}
		peer, err := h.LinkByName(LinkPeerName)
		if err != nil {
			return classify("finding "+LinkPeerName, err)
		}
		if err := h.LinkSetUp(peer); err != nil {
			return classify("bringing "+LinkPeerName+" up", err)
		}
		s.link = "veth"
	}
	link, err := h.LinkByName(LinkName)
	if err != nil {
		return classify("finding "+LinkName, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return classify("bringing "+LinkName+" up", err)
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: &LinkAddr4}); err != nil {
		return classify("adding "+LinkAddr4.String(), err)
	}
	if err := h.RouteAdd(&netlink.Route{
		LinkIndex: link.Attrs().Index,
		Scope:     netlink.SCOPE_LINK,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
	}); err != nil {
		return classify("adding the IPv4 default route", err)
	}

	// IPv6 is optional: a kernel booted with ipv6.disable=1 has none, and
	// then there is nothing to redirect either.
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: &LinkAddr6, Flags: unix.IFA_F_NODAD}); err != nil {
		if errors.Is(err, unix.EPERM) {
			return classify("adding "+LinkAddr6.String(), err)
		}
		return nil
	}
	if err := h.RouteAdd(&netlink.Route{
		LinkIndex: link.Attrs().Index,
		Scope:     netlink.SCOPE_LINK,
		Dst:       &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
	}); err != nil {
		return classify("adding the IPv6 default route", err)
	}
	s.ipv6 = true
	return nil
}

// Listen is net.Listen with the socket created inside the sandbox namespace.
// To receive both redirected IPv4 (to 127.0.0.1) and IPv6 (to ::1) on one
// port, listen on the dual-stack wildcard: Listen("tcp", ":0") or
// Listen("tcp", "[::]:PORT"). The wildcard also covers LinkName's
// addresses, which carry nothing and lead to the same listener anyway.
func (s *Sandbox) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := s.do(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket with the socket created inside the
// sandbox namespace. For redirected UDP (DNS) do NOT use the wildcard: a
// socket bound to it answers from the address the route picks (LinkName's),
// which does not match the conntrack entry of the redirect, so the reply is
// not translated back and the filter drops it. Bind one socket per family
// to the redirect target instead, on the same port: "127.0.0.1:P" (udp4)
// and "[::1]:P" (udp6).
func (s *Sandbox) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := s.do(func() (err error) {
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}

// Redirect installs the table "hookgate" in the sandbox namespace (see the
// package documentation), replacing any earlier one.
func (s *Sandbox) Redirect(r Redirect) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ns == -1 {
		return ErrClosed
	}
	return install(int(s.ns), r)
}

// Counters reads the packet counters of the table "hookgate" in the sandbox
// namespace.
func (s *Sandbox) Counters() (Counters, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ns == -1 {
		return Counters{}, ErrClosed
	}
	return readCounters(int(s.ns))
}

// Start starts cmd inside the sandbox namespace: cmd.Start runs on an OS
// thread that has entered the namespace, and the child inherits the
// thread's namespace. cmd runs in a process group of its own (Setpgid), so
// the whole group can be signalled; other SysProcAttr fields are kept.
//
// A Pdeathsig the caller sets fires when the whole process dies (the thread
// that forked the child goes back to Go's pool and lives as long as the
// process), except in the unlikely case where the thread cannot leave the
// namespace again: it is then ended, and with it such a child.
func (s *Sandbox) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	return s.do(cmd.Start)
}

// Close closes the Sandbox's reference to the namespace; the namespace
// itself goes when nothing else refers to it (close the listeners made in
// it, and let its processes end). Close is idempotent.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ns == -1 {
		return nil
	}
	err := s.ns.Close()
	s.ns = -1
	return err
}

// do runs f on an OS thread that has entered the sandbox namespace.
func (s *Sandbox) do(f func() error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ns == -1 {
		return ErrClosed
	}
	return onThread(func(vnetns.NsHandle) error {
		if err := vnetns.Set(s.ns); err != nil {
			return classify("entering the sandbox namespace", err)
		}
		return f()
	})
}

// onThread runs f on a fresh goroutine locked to its OS thread, giving it
// the thread's original namespace. Afterwards the thread goes back to that
// namespace and is unlocked; if that fails, the thread stays locked and Go
// ends it with the goroutine, so no other goroutine ever runs in the wrong
// namespace.
func onThread(f func(orig vnetns.NsHandle) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		err = f(orig)
		if cur, gerr := vnetns.Get(); gerr == nil {
			same := cur.Equal(orig)
			_ = cur.Close()
			if same || vnetns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
		}
		errc <- err
	}()
	return <-errc
}

// classify wraps err, naming what failed, and marks the two failures a user
// can act on: missing privilege and a missing kernel feature.
func classify(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return &PrivilegeError{Op: what, Err: err}
	case errors.Is(err, unix.EINVAL) && what == "creating a network namespace":
		return fmt.Errorf("%s: %w (network namespaces, CONFIG_NET_NS): %w", what, ErrKernel, err)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EAFNOSUPPORT),
		errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%s: %w: %w", what, ErrKernel, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
