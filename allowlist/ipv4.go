package allowlist

import (
	"fmt"
	"net/netip"
	"strings"
)

// endsInNumber reports whether a (lower-case) last label makes the whole host
// an IPv4 address: all decimal digits, or "0x" followed by hex digits (none
// is fine: inet_aton and WHATWG both read "0x" as 0).
func endsInNumber(label string) bool {
	if label == "" {
		return false
	}
	if strings.HasPrefix(label, "0x") {
		for i := 2; i < len(label); i++ {
			if !isHex(label[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(label); i++ {
		if label[i] < '0' || label[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
}

// parseIPv4 reads every spelling inet_aton(3) accepts, from a lower-case
// string: one to four parts separated by dots, each decimal, octal (leading
// 0) or hex (leading 0x); the last part fills all the bytes that remain, so
// "127.1" is 127.0.0.1 and "2130706433" is 127.0.0.1 too. We accept them
// because resolvers and libc do: refusing to understand them would let
// "0x7f.1" pass as a name and then be dialled as loopback.
func parseIPv4(s string) (netip.Addr, error) {
	var parts [4]uint32
	n := 0
	for rest := s; ; {
		part, tail, more := strings.Cut(rest, ".")
		if n == len(parts) {
			return netip.Addr{}, fmt.Errorf("%q ends in a number but has more than four parts, so it is not an IPv4 address", s)
		}
		v, err := parseIPv4Part(part)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%q ends in a number but is not an IPv4 address: %v", s, err)
		}
		parts[n] = v
		n++
		if !more {
			break
		}
		rest = tail
	}
	// Every part but the last is one byte; the last fills the rest.
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return netip.Addr{}, fmt.Errorf("%q ends in a number but is not an IPv4 address: part %d is more than 255", s, i+1)
		}
	}
	lastBits := uint(8 * (5 - n))
	if lastBits < 32 && parts[n-1] >= 1<<lastBits {
		return netip.Addr{}, fmt.Errorf("%q ends in a number but is not an IPv4 address: the last part is too large", s)
	}
	v := parts[n-1]
	for i := 0; i < n-1; i++ {
		v |= parts[i] << (24 - 8*uint(i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

// parseIPv4Part reads one inet_aton part without overflowing.
func parseIPv4Part(p string) (uint32, error) {
	if p == "" {
		return 0, fmt.Errorf("empty part")
	}
	base, digits := uint64(10), p
	switch {
	case strings.HasPrefix(p, "0x"):
		base, digits = 16, p[2:]
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return 0, fmt.Errorf("%q is not a number", p)
		}
		if d >= base {
			if base == 8 && d < 10 {
				return 0, fmt.Errorf("%q starts with 0, so it is octal, but has the digit %c", p, c)
			}
			return 0, fmt.Errorf("%q is not a number", p)
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, fmt.Errorf("%q is more than 32 bits", p)
		}
	}
	return uint32(v), nil
}

// canonicalIPv4 returns raw itself when it is already the dotted-decimal
// form, so the common case does not allocate.
func canonicalIPv4(raw string, ip netip.Addr) string {
	var buf [15]byte
	if b := ip.AppendTo(buf[:0]); string(b) == raw {
		return raw
	}
	return ip.String()
}
