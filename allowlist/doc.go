// Package allowlist decides where the sandbox may connect.
//
// It has two halves, matching the two moments of a decision:
//
//   - By name, before any DNS: [NormalizeHost] turns whatever a client wrote
//     (Host header, CONNECT target, TLS SNI, absolute URI) into one canonical
//     spelling, and a compiled [Policy] (built by [New] from the
//     network.allowlist domains) says whether that name is allowed and which
//     entry allowed it.
//   - By address, after DNS, on every address actually dialled: [Classify]
//     names the class of an address (loopback, private, cloud metadata, ...)
//     and an [AddrPolicy] says whether the gateway may dial it.
//
// Both halves are needed: a name says nothing about where it resolves (DNS
// rebinding), and an address says nothing about which allowlist entry, and so
// which credentials, apply.
//
// The package does no I/O and imports no network library: it is pure
// functions over strings and [net/netip] values, so the proxy, the DNS
// responder and the config checker all share one definition of "allowed".
// Every value it returns is immutable and safe for concurrent use.
package allowlist
