package proxy

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h.
const ip6tSOOriginalDst = 80

// OriginalDst returns the destination a redirected connection was aimed at
// before nftables/iptables REDIRECT (or DNAT) sent it to us, from the
// conntrack entry of the socket's network namespace (SO_ORIGINAL_DST).
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := innermost(c).(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("original destination: not a TCP connection")
	}
	local, err := netip.ParseAddrPort(tc.LocalAddr().String())
	if err != nil {
		return netip.AddrPort{}, err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var (
		dst    netip.AddrPort
		optErr error
	)
	err = rc.Control(func(fd uintptr) {
		if local.Addr().Unmap().Is4() {
			// sockaddr_in read through the 16-byte IPv6Mreq shape:
			// family(2) port(2, network order) addr(4) zero(8).
			var m *unix.IPv6Mreq
			m, optErr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if optErr == nil {
				raw := m.Multiaddr
				dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[4:8])), binary.BigEndian.Uint16(raw[2:4]))
			}
			return
		}
		// sockaddr_in6 read through IPv6MTUInfo, whose first field is one.
		var info *unix.IPv6MTUInfo
		info, optErr = unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst)
		if optErr == nil {
			// Port holds network-order bytes read as a native uint16.
			var b [2]byte
			binary.NativeEndian.PutUint16(b[:], info.Addr.Port)
			dst = netip.AddrPortFrom(netip.AddrFrom16(info.Addr.Addr).Unmap(), binary.BigEndian.Uint16(b[:]))
		}
	})
	if err == nil {
		err = optErr
	}
	if err != nil {
		return netip.AddrPort{}, err
	}
	return dst, nil
}
