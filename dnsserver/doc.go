// Package dnsserver is the sandbox's only DNS resolver. It answers only what
// the gateway would let through, so that DNS can be used neither to
// exfiltrate data (a query for secret.attacker.example never leaves the
// gateway) nor to learn internal addresses (a name that resolves to
// loopback, a private range or cloud metadata is refused, not answered).
//
// For every query, in this order:
//
//   - A message that is not a query (QR set) gets no reply. An opcode other
//     than QUERY gets NOTIMP. Anything but exactly one question is FORMERR.
//     A class other than IN is REFUSED.
//   - The name goes through [allowlist.NormalizeHost]. A name it rejects,
//     a name that spells an IP address ("1.2.3.4.", "0x7f.1."), and
//     "localhost" or a name below it are REFUSED.
//   - The CURRENT allowlist ([Options.Policy], read per query so a reload
//     takes effect at once) must allow the name, or the answer is REFUSED.
//     Nothing of a refused name is ever sent upstream. In report mode
//     ([config.Policy.Report]) a name the allowlist denies is answered all
//     the same, as one that matched no entry, with reason "would-deny":
//     the proxy then sees the connection and logs it; every address is
//     still judged as below.
//   - A and AAAA are looked up upstream (LookupNetIP with "ip4"/"ip6" on the
//     rooted name, so the gateway host's search domains never apply) and
//     answered only if EVERY address handed out passes the current policy
//     ([config.Policy.CheckAddrs], the function the proxy judges with: the
//     address policy, then the ranges the matched entry pins, if any); one
//     refused address refuses the whole answer, with a reason naming the
//     address and its class or the pin (DNS rebinding cannot hand the
//     sandbox an internal address). Addresses are judged with port
//     0: AddrPolicy exemptions are exact address+port pairs for test
//     upstreams and can never have port 0, so they open nothing through DNS.
//   - HTTPS and SVCB for an allowed name get NOERROR with no answer
//     (NODATA), without an upstream lookup: clients then fall back at once
//     to A/AAAA, where REFUSED could make them retry or fail, and the
//     records' address hints and ECH configs never reach the sandbox
//     unchecked. Every other type (MX, TXT, PTR, NS, SOA, ANY, ...) is
//     REFUSED.
//
// Empty answers: Go's resolver reports "no such host" both for a name that
// does not exist and for a name with no address of the asked family. To
// tell them apart the server looks up the other family: if that has
// addresses the answer is NODATA (NOERROR, empty), otherwise NXDOMAIN.
// Answering NXDOMAIN to AAAA for an IPv4-only name would be wrong: RFC 8020
// lets resolvers conclude the name is gone for every type.
//
// Upstream failures and timeouts ([Options.Timeout]) are SERVFAIL.
//
// Sinkhole: REFUSED makes every tool say "could not resolve host", and an
// agent concludes the network is broken. A policy with [config.Policy.Sinkhole]
// addresses answers the names it denies (by the allowlist, or by the
// address policy) with them instead: A and AAAA get the sinkhole address of
// their family (NODATA when there is none), HTTPS and SVCB get NODATA, with
// a short TTL; every other type, and the names refused before the policy is
// asked (bad names, IP-literal names, localhost), stay REFUSED. The
// decision's verdict is "sinkhole" and its reason says why the name was
// denied. The addresses must lead to the gateway's transparent listener
// (sandbox exec and serve --redirect send every TCP connection there),
// which judges the connection by its SNI or Host like any other — it dials
// the name, never the address the client aimed at — and answers a denied
// name with the readable 403 naming the rule. So the sinkhole opens
// nothing: it only changes where a denied connection learns that it is
// denied. The gateway also makes the addresses its own in the address
// policy, so that a connection naming no host (TLS without SNI) to them is
// refused too.
//
// The cache holds what upstream said (addresses, "no addresses", "no such
// name"), keyed by normalised name and type, for [Options.TTL]; failures are
// not cached. Policy is never cached: every hit is judged again against the
// current allowlist and address policy, so a reload that removes a name or
// reopens a range applies to cached entries too, and a refusal by address
// policy is remembered (the blocked addresses are cached) without another
// upstream lookup. Concurrent misses for one key share one upstream lookup,
// and at most a fixed number of upstream lookups run at once.
//
// Note that an allowlist entry "*" lets the sandbox query any name, and so
// carry data out in the names it asks for; that is the same trust "*" gives
// HTTP.
//
// Every answer is one decision line (zerolog, message "dns") with the
// fields client, name, type, verdict, reason, cached, addrs and duration_ms.
// Verdicts are "answer" (including NODATA), "sinkhole", "refused",
// "nxdomain", "servfail", "formerr" and "notimp".
package dnsserver
