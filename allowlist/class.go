package allowlist

import (
	"fmt"
	"net/netip"
)

// Class is what an address is, for the purpose of deciding whether the
// gateway may dial it. The zero value is ClassPublic.
type Class uint8

const (
	ClassPublic         Class = iota // routable on the internet (documentation ranges included)
	ClassLoopback                    // 127.0.0.0/8, ::1: never dialled
	ClassUnspecified                 // 0.0.0.0/8, ::: reaches the local host on many stacks
	ClassLinkLocal                   // 169.254.0.0/16, fe80::/10
	ClassMetadata                    // cloud instance metadata services
	ClassPrivate                     // 10/8, 172.16/12, 192.168/16
	ClassCGNAT                       // 100.64.0.0/10
	ClassUniqueLocal                 // fc00::/7
	ClassMulticast                   // 224.0.0.0/4, ff00::/8
	ClassBroadcast                   // 255.255.255.255
	ClassReserved                    // 240.0.0.0/4
	ClassIPv4Compatible              // ::/96 other than :: and ::1 (deprecated; some stacks map it to IPv4)
	ClassOwn                         // the gateway's own address; only AddrPolicy produces it
	ClassInvalid                     // the zero netip.Addr
)

var classNames = [...]string{
	ClassPublic:         "public",
	ClassLoopback:       "loopback",
	ClassUnspecified:    "unspecified",
	ClassLinkLocal:      "link-local",
	ClassMetadata:       "cloud metadata",
	ClassPrivate:        "private",
	ClassCGNAT:          "carrier-grade NAT",
	ClassUniqueLocal:    "unique local",
	ClassMulticast:      "multicast",
	ClassBroadcast:      "broadcast",
	ClassReserved:       "reserved",
	ClassIPv4Compatible: "IPv4-compatible IPv6",
	ClassOwn:            "the gateway's own address",
	ClassInvalid:        "invalid",
}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Classify names the class of an address. IPv4-mapped IPv6 is judged as the
// IPv4 address it maps. Translation prefixes that carry an IPv4 address
// (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16, Teredo 2001::/32)
// take the class of the embedded address when that is not public, because a
// translator on the path would deliver the packet there. It does not
// allocate.
func Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return ClassInvalid
	}
	a = a.Unmap()
	if a.Is4() {
		return classify4(a.As4())
	}
	return classify6(a.As16())
}

func classify4(b [4]byte) Class {
	// Metadata addresses sit inside link-local, CGNAT and 192.0.0.0/24, so
	// they are checked first to get the more telling name.
	switch b {
	case [4]byte{169, 254, 169, 254}, // AWS, GCP, Azure, OpenStack, ...
		[4]byte{169, 254, 170, 2},   // AWS ECS task metadata
		[4]byte{100, 100, 100, 200}, // Alibaba Cloud
		[4]byte{192, 0, 0, 192}:     // Oracle Cloud
		return ClassMetadata
	case [4]byte{255, 255, 255, 255}:
		return ClassBroadcast
	}
	switch {
	case b[0] == 0:
		return ClassUnspecified
	case b[0] == 127:
		return ClassLoopback
	case b[0] == 10,
		b[0] == 172 && b[1]&0xf0 == 16,
		b[0] == 192 && b[1] == 168:
		return ClassPrivate
	case b[0] == 169 && b[1] == 254:
		return ClassLinkLocal
	case b[0] == 100 && b[1]&0xc0 == 64:
		return ClassCGNAT
	case b[0]&0xf0 == 224:
		return ClassMulticast
	case b[0]&0xf0 == 240:
		return ClassReserved
	}
	return ClassPublic
}

func classify6(b [16]byte) Class {
	switch {
	case b == [16]byte{}:
		return ClassUnspecified
	case b == [16]byte{15: 1}:
		return ClassLoopback
	case b == [16]byte{0xfd, 0x00, 0x0e, 0xc2, 14: 0x02, 15: 0x54}: // fd00:ec2::254, AWS IMDS over IPv6
		return ClassMetadata
	case zero(b[:12]):
		return ClassIPv4Compatible
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b:
		if zero(b[4:12]) { // 64:ff9b::/96, RFC 6052 well-known prefix
			return embedded(ClassPublic, [4]byte(b[12:16]))
		}
		if b[4] == 0x00 && b[5] == 0x01 { // 64:ff9b:1::/48, RFC 8215 local use
			return nat64Local(b)
		}
	case b[0] == 0x20 && b[1] == 0x02: // 6to4, RFC 3056: 2002:V4ADDR::/48
		return embedded(ClassPublic, [4]byte(b[2:6]))
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00: // Teredo, RFC 4380
		server := embedded(ClassPublic, [4]byte(b[4:8]))
		client := [4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}
		return embedded(server, client)
	case b[0] == 0xfe && b[1]&0xc0 == 0x80:
		return ClassLinkLocal
	case b[0]&0xfe == 0xfc:
		return ClassUniqueLocal
	case b[0] == 0xff:
		return ClassMulticast
	}
	return ClassPublic
}

// nat64Local judges 64:ff9b:1::/48. The operator picks the prefix length
// inside it (RFC 6052 allows /48, /56, /64 or /96 here) and the address alone
// does not say which, so every embedding is read and the most restrictive
// wins. Readings that land in 0.0.0.0/8 are ignored: they are the zero
// padding of another length (64:ff9b:1::8.8.8.8 read as /48 is 0.0.0.0), and
// a translator does not forward to 0/8 anyway. What remains can still block
// a public address for a /64 user whose last octet looks special (the /96
// reading); AllowCIDRs reopens it unless it looks like loopback.
func nat64Local(b [16]byte) Class {
	c := ClassPublic
	for _, v4 := range [...][4]byte{
		{b[6], b[7], b[9], b[10]},   // /48 (byte 8 is the reserved "u" octet)
		{b[7], b[9], b[10], b[11]},  // /56
		{b[9], b[10], b[11], b[12]}, // /64
		[4]byte(b[12:16]),           // /96
	} {
		if v4[0] != 0 {
			c = embedded(c, v4)
		}
	}
	return c
}

// embedded returns the more restrictive of c and the class of the IPv4
// address v4; on a tie, c.
func embedded(c Class, v4 [4]byte) Class {
	if e := classify4(v4); severity(e) > severity(c) {
		return e
	}
	return c
}

// severity orders classes for "the most restrictive wins": never dialled,
// then the classes that would reach the host or cloud control plane, then
// the rest of the blocked-by-default ones.
func severity(c Class) int {
	switch c {
	case ClassPublic:
		return 0
	case ClassLoopback, ClassIPv4Compatible, ClassOwn, ClassInvalid:
		return 3
	case ClassUnspecified, ClassMetadata:
		return 2
	}
	return 1
}

func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
