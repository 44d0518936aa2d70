package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

const (
	// defaultLeafCacheSize is the LeafCache bound when NewLeafCache is given
	// zero (or less).
	defaultLeafCacheSize = 1024

	leafValidity = 24 * time.Hour
	leafBackdate = time.Hour // tolerates sandbox clocks a little behind
	leafRenew    = time.Hour // remint when a leaf has less than this left
)

// LeafCache mints leaf certificates for host names and IP addresses, signed
// by the CA, and keeps the most recently used ones: a bounded LRU. Concurrent
// Gets for the same host (a burst of handshakes) mint once. A leaf is reminted
// when it is within an hour of expiry. Safe for concurrent use.
type LeafCache struct {
	ca  *CA
	now func() time.Time // for tests; time.Now otherwise

	flight singleflight.Group
	mints  atomic.Int64 // leaves minted, for tests and metrics

	leaves *lru.Cache[string, *tls.Certificate] // normalised host → leaf
}

// NewLeafCache returns a cache of at most size leaves (defaultLeafCacheSize
// if size ≤ 0) signed by c.
func NewLeafCache(c *CA, size int) *LeafCache {
	if size <= 0 {
		size = defaultLeafCacheSize
	}
	// lru.New fails only for a size below one, excluded above.
	leaves, _ := lru.New[string, *tls.Certificate](size)
	return &LeafCache{ca: c, now: time.Now, leaves: leaves}
}

// Get returns a certificate for host: a DNS name (any case, one trailing
// dot ignored; IDNA names in their punycode form) or an IP literal, which
// gets an IP SAN. The tls.Certificate has Leaf set and a chain of the leaf
// alone (clients trust the CA itself). The result is shared: do not modify it.
func (l *LeafCache) Get(host string) (*tls.Certificate, error) {
	key, ip, err := normalizeHost(host)
	if err != nil {
		return nil, err
	}
	if cert := l.lookup(key); cert != nil {
		return cert, nil
	}
	v, err, _ := l.flight.Do(key, func() (any, error) {
		// Another flight may have just finished for this host.
		if cert := l.lookup(key); cert != nil {
			return cert, nil
		}
		cert, err := l.mint(key, ip)
		if err != nil {
			return nil, err
		}
		l.store(key, cert)
		return cert, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// lookup returns the cached, still fresh leaf for key and marks it used.
func (l *LeafCache) lookup(key string) *tls.Certificate {
	cert, ok := l.leaves.Get(key)
	if !ok || !l.now().Before(cert.Leaf.NotAfter.Add(-leafRenew)) {
		return nil // missing or stale: the caller mints one and replaces it
	}
	return cert
}

func (l *LeafCache) store(key string, cert *tls.Certificate) {
	l.leaves.Add(key, cert)
}

// Retain drops the cached leaves whose host no longer qualifies, e.g. after
// a reload removed its allowlist entry. keep is called with the host as
// normalised by Get. A Get already minting when Retain runs may still add
// its leaf.
func (l *LeafCache) Retain(keep func(host string) bool) {
	for _, host := range l.leaves.Keys() {
		if !keep(host) {
			l.leaves.Remove(host)
		}
	}
}

// mint creates a leaf for the normalised host (ip valid for an IP literal).
func (l *LeafCache) mint(host string, ip netip.Addr) (*tls.Certificate, error) {
	now := l.now()
	caCert := l.ca.cert
	if !now.Before(caCert.NotAfter) {
		return nil, fmt.Errorf("ca: CA certificate expired on %s", caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("ca: leaf serial: %w", err)
	}
	notAfter := now.Add(leafValidity)
	if caCert.NotAfter.Before(notAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), l.ca.key)
	if err != nil {
		return nil, fmt.Errorf("ca: leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: leaf for %s: %w", host, err)
	}
	l.mints.Add(1)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

var errBadHost = errors.New("ca: invalid host for a certificate")

// normalizeHost returns the cache key for host: a lower-case DNS name
// without trailing dot, or the canonical text of an IP address (brackets
// removed, IPv4-mapped IPv6 unmapped).
func normalizeHost(host string) (string, netip.Addr, error) {
	h := strings.TrimSuffix(host, ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	// Only try to parse what can be an address: ParseAddr allocates its
	// error, and the cache-hit path for names should not.
	if strings.IndexFunc(h, func(r rune) bool { return r != '.' && r != ':' && r != '%' && !isHex(r) }) < 0 {
		if ip, err := netip.ParseAddr(h); err == nil {
			if ip.Zone() != "" {
				return "", netip.Addr{}, fmt.Errorf("%w: %q has a zone", errBadHost, host)
			}
			ip = ip.Unmap()
			return ip.String(), ip, nil
		}
	}
	h = strings.ToLower(h)
	if h == "" || len(h) > 253 {
		return "", netip.Addr{}, fmt.Errorf("%w: %q", errBadHost, host)
	}
	labelLen := 0
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == '.' {
			if labelLen == 0 || labelLen > 63 {
				return "", netip.Addr{}, fmt.Errorf("%w: %q", errBadHost, host)
			}
			labelLen = 0
			continue
		}
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return "", netip.Addr{}, fmt.Errorf("%w: %q (use the punycode form of IDNA names)", errBadHost, host)
		}
		labelLen++
	}
	return h, netip.Addr{}, nil
}

func isHex(r rune) bool {
	return '0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F'
}
