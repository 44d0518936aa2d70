package allowlist

import (
	"net/netip"
	"testing"
)

// classCases has both sides of every boundary. It is shared with the
// AddrPolicy tests and the benchmark.
var classCases = []struct {
	addr string
	want Class
}{
	// 0.0.0.0/8 unspecified.
	{"0.0.0.0", ClassUnspecified},
	{"0.255.255.255", ClassUnspecified},
	{"1.0.0.0", ClassPublic},
	// 10/8 private.
	{"9.255.255.255", ClassPublic},
	{"10.0.0.0", ClassPrivate},
	{"10.255.255.255", ClassPrivate},
	{"11.0.0.0", ClassPublic},
	// 100.64/10 CGNAT, with Alibaba metadata inside.
	{"100.63.255.255", ClassPublic},
	{"100.64.0.0", ClassCGNAT},
	{"100.100.100.199", ClassCGNAT},
	{"100.100.100.200", ClassMetadata},
	{"100.100.100.201", ClassCGNAT},
	{"100.127.255.255", ClassCGNAT},
	{"100.128.0.0", ClassPublic},
	// 127/8 loopback.
	{"126.255.255.255", ClassPublic},
	{"127.0.0.0", ClassLoopback},
	{"127.0.0.1", ClassLoopback},
	{"127.255.255.255", ClassLoopback},
	{"128.0.0.0", ClassPublic},
	// 169.254/16 link-local, with metadata inside.
	{"169.253.255.255", ClassPublic},
	{"169.254.0.0", ClassLinkLocal},
	{"169.254.169.253", ClassLinkLocal},
	{"169.254.169.254", ClassMetadata},
	{"169.254.169.255", ClassLinkLocal},
	{"169.254.170.1", ClassLinkLocal},
	{"169.254.170.2", ClassMetadata},
	{"169.254.170.3", ClassLinkLocal},
	{"169.254.255.255", ClassLinkLocal},
	{"169.255.0.0", ClassPublic},
	// 172.16/12 private.
	{"172.15.255.255", ClassPublic},
	{"172.16.0.0", ClassPrivate},
	{"172.31.255.255", ClassPrivate},
	{"172.32.0.0", ClassPublic},
	// 192.0.0.192 Oracle metadata, in an otherwise public (here) /24.
	{"192.0.0.191", ClassPublic},
	{"192.0.0.192", ClassMetadata},
	{"192.0.0.193", ClassPublic},
	// Documentation ranges are public: they are what our e2e tests use.
	{"192.0.2.0", ClassPublic},
	{"192.0.2.255", ClassPublic},
	{"198.51.100.1", ClassPublic},
	{"203.0.113.1", ClassPublic},
	// 192.168/16 private.
	{"192.167.255.255", ClassPublic},
	{"192.168.0.0", ClassPrivate},
	{"192.168.255.255", ClassPrivate},
	{"192.169.0.0", ClassPublic},
	// 224/4 multicast, 240/4 reserved, broadcast.
	{"223.255.255.255", ClassPublic},
	{"224.0.0.0", ClassMulticast},
	{"239.255.255.255", ClassMulticast},
	{"240.0.0.0", ClassReserved},
	{"255.255.255.254", ClassReserved},
	{"255.255.255.255", ClassBroadcast},

	// IPv6.
	{"::", ClassUnspecified},
	{"::1", ClassLoopback},
	{"::2", ClassIPv4Compatible},
	{"::127.0.0.1", ClassIPv4Compatible},
	{"::ffff:ffff", ClassIPv4Compatible},
	{"::1:0:0", ClassPublic}, // just past ::/96 (0::1:0:0 is in ::/80 but not ::/96)
	{"::fffe:ffff:ffff", ClassPublic},
	// IPv4-mapped: judged as IPv4.
	{"::ffff:127.0.0.1", ClassLoopback},
	{"::ffff:10.0.0.1", ClassPrivate},
	{"::ffff:169.254.169.254", ClassMetadata},
	{"::ffff:0.0.0.0", ClassUnspecified},
	{"::ffff:8.8.8.8", ClassPublic},
	// fe80::/10 link-local.
	{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPublic},
	{"fe80::", ClassLinkLocal},
	{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassLinkLocal},
	{"fec0::", ClassPublic},
	// fc00::/7 unique local, with AWS metadata inside.
	{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPublic},
	{"fc00::", ClassUniqueLocal},
	{"fd00:ec2::253", ClassUniqueLocal},
	{"fd00:ec2::254", ClassMetadata},
	{"fd00:ec2::255", ClassUniqueLocal},
	{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassUniqueLocal},
	{"fe00::", ClassPublic},
	// ff00::/8 multicast.
	{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPublic},
	{"ff00::", ClassMulticast},
	{"ff02::1", ClassMulticast},
	{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassMulticast},
	// Documentation and ordinary global unicast.
	{"2001:db8::1", ClassPublic},
	{"2606:4700::1111", ClassPublic},
	// NAT64 64:ff9b::/96.
	{"64:ff9b::8.8.8.8", ClassPublic},
	{"64:ff9b::127.0.0.1", ClassLoopback},
	{"64:ff9b::10.0.0.1", ClassPrivate},
	{"64:ff9b::169.254.169.254", ClassMetadata},
	{"64:ff9b::9.255.255.255", ClassPublic},
	{"64:ff9b:0:0:0:1::", ClassPublic}, // in 64:ff9b::/32 but not the /96
	{"64:ff9a::127.0.0.1", ClassPublic},
	// NAT64 local use 64:ff9b:1::/48, every RFC 6052 embedding.
	{"64:ff9b:1::8.8.8.8", ClassPublic},
	{"64:ff9b:1::127.0.0.1", ClassLoopback},   // /96
	{"64:ff9b:1:7f00:0:100::", ClassLoopback}, // /48: 7f00 | u=00 01 00
	{"64:ff9b:1:7f:0:1:0:0", ClassLoopback},   // /56: 7f | u | 00 00 01
	{"64:ff9b:1:0:a:0:100:0", ClassPrivate},   // /64: u=00, 0a 00 00 01
	{"64:ff9b:1::10.0.0.1", ClassPrivate},
	{"64:ff9b:1:0:8:808:800:0", ClassPublic}, // /64 8.8.8.8
	{"64:ff9b:1:808:8:800::", ClassPublic},   // /48 8.8.8.8
	{"64:ff9b:2::127.0.0.1", ClassPublic},    // outside the /48
	// 6to4 2002::/16.
	{"2002:808:808::1", ClassPublic},
	{"2002:7f00:1::1", ClassLoopback},
	{"2002:a00:1::", ClassPrivate},
	{"2002:a9fe:a9fe::", ClassMetadata},
	{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPublic},
	{"2003::", ClassPublic},
	// Teredo 2001::/32: server in bits 32-63, client = last 32 bits xor ones.
	{"2001:0:808:808::f7f7:f7f7", ClassPublic},   // server 8.8.8.8, client 8.8.8.8
	{"2001:0:7f00:1::f7f7:f7f7", ClassLoopback},  // server 127.0.0.1
	{"2001:0:808:808::80ff:fffe", ClassLoopback}, // client 127.0.0.1
	{"2001:0:808:808::f5ff:fffe", ClassPrivate},  // client 10.0.0.1
	{"2001:0:a00:1::80ff:fffe", ClassLoopback},   // server private, client loopback: loopback wins
	{"2001:0:a00:1::5601:5601", ClassMetadata},   // server private, client metadata: metadata wins
	{"2001:1::7f00:1", ClassPublic},              // 2001:1::/32 is not Teredo
	{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPublic},

	{"", ClassInvalid},
}

func TestClassify(t *testing.T) {
	for _, tc := range classCases {
		t.Run(tc.addr, func(t *testing.T) {
			var a netip.Addr
			if tc.addr != "" {
				a = netip.MustParseAddr(tc.addr)
			}
			if got := Classify(a); got != tc.want {
				t.Errorf("Classify(%s) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
}

func TestClassifyIgnoresZone(t *testing.T) {
	if got := Classify(netip.MustParseAddr("fe80::1%eth0")); got != ClassLinkLocal {
		t.Errorf("Classify(fe80::1%%eth0) = %v, want link-local", got)
	}
}

func TestClassifyDoesNotAllocate(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("2001:0:808:808::80ff:fffe")}
	if n := testing.AllocsPerRun(100, func() {
		for _, a := range addrs {
			Classify(a)
		}
	}); n != 0 {
		t.Errorf("Classify allocated %v times per run, want 0", n)
	}
}

func TestClassString(t *testing.T) {
	want := map[Class]string{
		ClassPublic: "public", ClassLoopback: "loopback", ClassUnspecified: "unspecified",
		ClassLinkLocal: "link-local", ClassMetadata: "cloud metadata", ClassPrivate: "private",
		ClassCGNAT: "carrier-grade NAT", ClassUniqueLocal: "unique local", ClassMulticast: "multicast",
		ClassBroadcast: "broadcast", ClassReserved: "reserved", ClassIPv4Compatible: "IPv4-compatible IPv6",
		ClassOwn: "the gateway's own address", ClassInvalid: "invalid", 200: "Class(200)",
	}
	for c, w := range want {
		if got := c.String(); got != w {
			t.Errorf("Class(%d).String() = %q, want %q", uint8(c), got, w)
		}
	}
}
