// Package netns builds the network side of a sandbox: a network namespace
// whose only way out is the gateway, and the nftables rules that make it so.
//
// # Design: listeners inside, dials outside, no veth
//
// The namespace is not routed to the host through a veth pair. Instead the
// gateway creates its transparent (TCP) listener and its DNS listeners INSIDE
// the sandbox namespace (Sandbox.Listen and Sandbox.ListenPacket make the
// socket on an OS thread that has entered the namespace, then leave it),
// while its upstream dials are made from its own namespace as usual. In the
// sandbox namespace an nftables table "hookgate" (family inet) then
//
//   - redirects, in the nat OUTPUT hook, every TCP connection (IPv4 and IPv6,
//     any destination, 127.0.0.0/8 and ::1 included, except the listener
//     ports themselves on loopback) to the transparent listener, and UDP and
//     TCP to port 53 to the DNS listener (REDIRECT: to 127.0.0.1 or ::1);
//     with Redirect.LocalLoopback (a namespace of its own), TCP to loopback
//     other than port 53 stays local, so the sandbox's own loopback servers
//     work;
//   - in a filter OUTPUT chain accepts what goes to loopback after that
//     redirect, established and related packets and IPv6 neighbour discovery
//     (never routed anywhere), and drops everything else: other UDP, ICMP to
//     the outside, raw IP, IPv4 and IPv6 alike.
//
// Consequences: SO_ORIGINAL_DST works (the conntrack of the sandbox
// namespace saw the redirect; see OriginalDst); the sandbox cannot reach any
// other port of the gateway (they are in another namespace); nothing at all
// is installed in the host namespace, so no host firewall changes and no
// routes to leak through, and a crash leaves nothing behind: the namespace is
// anonymous (never bind-mounted under /run/netns) and dies with the last
// reference to it (our fd, a socket created in it, a process in it).
//
// Routing must succeed for a packet to reach the nat hook at all, so the
// namespace has lo up plus a link "hg0" with one address per family,
// 169.254.77.1/32 and fd68:676b::1/128, and default routes for both families
// through it. These addresses never carry traffic: every TCP connection is
// redirected to loopback before it leaves, and every other packet is
// dropped. hg0 is a dummy link when the kernel has one (CONFIG_DUMMY), and
// otherwise a veth pair whose both ends (hg0, hg1) stay inside the namespace.
//
// # Shared-namespace mode
//
// For containers that join the gateway's own namespace (`network_mode:
// service:gateway`), InstallRedirect installs the same table in the current
// namespace, exempting sockets that carry a mark (SO_MARK, set by the
// gateway on every socket it dials upstream, its resolver's included): the
// gateway's own traffic is neither redirected nor dropped. REDIRECT in the
// OUTPUT hook maps to 127.0.0.1 and ::1, so the transparent and DNS
// listeners must listen on loopback or on the wildcard address.
//
// The package configures links with netlink and rules with nftables through
// github.com/vishvananda/netlink and github.com/google/nftables; it never
// runs ip, iptables or nft. Everything here needs root (CAP_SYS_ADMIN and
// CAP_NET_ADMIN).
package netns
