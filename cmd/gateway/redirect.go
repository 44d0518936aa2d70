package main

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hookgate/hookgate/sandbox/netns"
)

// redirectMark is the SO_MARK on the gateway's own sockets in
// shared-namespace mode: the redirect rules let marked packets through, so
// the gateway's upstream connections and DNS lookups are not sent back to
// itself. ("hg" in ASCII.)
const redirectMark = 0x6867

// markSocket is a net.Dialer Control that sets redirectMark.
func markSocket(_, _ string, c syscall.RawConn) error {
	var setErr error
	if err := c.Control(func(fd uintptr) {
		setErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, redirectMark)
	}); err != nil {
		return err
	}
	if setErr != nil {
		return fmt.Errorf("setting SO_MARK on an upstream socket (needs CAP_NET_ADMIN): %w", setErr)
	}
	return nil
}

// installRedirect installs the shared-namespace redirect rules: every other
// process's TCP to the transparent listener, its DNS to the DNS listener.
func installRedirect(ls *listeners) (func() error, error) {
	return netns.InstallRedirect(netns.Redirect{
		TCPPort:    portOf(ls.transparent.Addr()),
		DNSPort:    portOf(ls.dnsTCP.Addr()),
		ExemptMark: redirectMark,
	})
}

func portOf(a net.Addr) uint16 {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return 0
	}
	return ap.Port()
}

// sinkholeAddrs are the addresses the sandbox's DNS server answers for
// denied names under network.dns.denied: sinkhole — the sandbox link's
// (netns.LinkAddr4, and netns.LinkAddr6 when the namespace has IPv6). In a
// sandbox namespace they are the namespace's own, where the transparent
// listener (bound to the wildcard) owns them; in a shared namespace (serve
// --redirect) the redirect takes every TCP connection to the listener
// whatever its address. Link-local and unique-local, they lead nowhere
// else. The address policy counts them as the gateway's own, so that they
// are never dialled, whatever allow_cidrs re-opens.
func sinkholeAddrs(ipv6 bool) []netip.Addr {
	addrs := []netip.Addr{ipNetAddr(netns.LinkAddr4)}
	if ipv6 {
		addrs = append(addrs, ipNetAddr(netns.LinkAddr6))
	}
	return addrs
}

func ipNetAddr(n net.IPNet) netip.Addr {
	a, _ := netip.AddrFromSlice(n.IP)
	return a.Unmap()
}
