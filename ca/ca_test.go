package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestCA(t testing.TB) *CA {
	t.Helper()
	certPath, keyPath, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "ca")
	certPath, keyPath, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	if certPath != filepath.Join(dir, "ca.pem") || keyPath != filepath.Join(dir, "ca-key.pem") {
		t.Errorf("paths %s %s", certPath, keyPath)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, keyPath: 0o600, certPath: 0o644} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode %v, want %v", path, fi.Mode(), want)
		}
	}
	keyPEM, _ := os.ReadFile(keyPath)
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("key file is not a PKCS#8 PEM")
	}
	c, err := Load(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	cert := c.cert
	if !strings.HasPrefix(cert.Subject.CommonName, "hookgate CA ") || len(cert.Subject.CommonName) != len("hookgate CA ")+8 {
		t.Errorf("CN %q", cert.Subject.CommonName)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("basic constraints: %+v", cert)
	}
	if cert.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("key usage %v", cert.KeyUsage)
	}
	if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key %T", cert.PublicKey)
	}
	if life := time.Until(cert.NotAfter); life < 9*365*24*time.Hour || life > 11*365*24*time.Hour {
		t.Errorf("lifetime %v", life)
	}
	if len(cert.SubjectKeyId) == 0 {
		t.Error("no subject key id")
	}
	if b, _ := pem.Decode(c.CertPEM()); b == nil || b.Type != "CERTIFICATE" {
		t.Error("CertPEM")
	}
}

func TestInitRefusesOverwrite(t *testing.T) {
	for _, existing := range []string{"ca.pem", "ca-key.pem"} {
		t.Run(existing, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, existing)
			if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := Init(dir)
			if err == nil || !strings.Contains(err.Error(), path+" already exists") {
				t.Fatalf("err = %v", err)
			}
			if b, _ := os.ReadFile(path); string(b) != "keep me" {
				t.Error("file overwritten")
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("Init left files behind: %v", entries)
			}
		})
	}
	dir := t.TempDir()
	if _, _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Init(dir); err == nil {
		t.Fatal("second Init succeeded")
	}
}

// writePEM writes PEM blocks to a new file in dir.
func writePEM(t *testing.T, dir, name string, blocks ...*pem.Block) string {
	t.Helper()
	var b []byte
	for _, bl := range blocks {
		b = append(b, pem.EncodeToMemory(bl)...)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// makeCert self-signs a certificate from tmpl with a new key and returns
// the cert and key PEM blocks.
func makeCert(t *testing.T, tmpl *x509.Certificate) (*pem.Block, *pem.Block) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl.SerialNumber, _ = randomSerial()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := x509.MarshalPKCS8PrivateKey(key)
	return &pem.Block{Type: "CERTIFICATE", Bytes: der}, &pem.Block{Type: "PRIVATE KEY", Bytes: k}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	goodCert, goodKey, err := Init(filepath.Join(dir, "good"))
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, _ := Init(filepath.Join(dir, "other"))
	now := time.Now()
	caTmpl := func(nb, na time.Time) *x509.Certificate {
		return &x509.Certificate{NotBefore: nb, NotAfter: na, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign}
	}
	expCert, expKey := makeCert(t, caTmpl(now.Add(-48*time.Hour), now.Add(-time.Hour)))
	futCert, futKey := makeCert(t, caTmpl(now.Add(time.Hour), now.Add(48*time.Hour)))
	leafCert, leafKey := makeCert(t, &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	noSignCert, noSignKey := makeCert(t, &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature})
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sec1, _ := x509.MarshalECPrivateKey(ecKey)

	tests := []struct {
		name      string
		cert, key string
		want      string
	}{
		{"missing cert", filepath.Join(dir, "nope.pem"), goodKey, "certificate file " + filepath.Join(dir, "nope.pem") + " does not exist"},
		{"missing key", goodCert, filepath.Join(dir, "nope-key.pem"), "key file " + filepath.Join(dir, "nope-key.pem") + " does not exist"},
		{"cert not PEM", writePEM(t, dir, "junk.pem"), goodKey, "holds no PEM CERTIFICATE block"},
		{"key not PEM", goodCert, writePEM(t, dir, "junk-key.pem"), "holds no PEM private key block"},
		{"key is garbage", goodCert, writePEM(t, dir, "bad-key.pem", &pem.Block{Type: "PRIVATE KEY", Bytes: []byte("xx")}), "cannot parse PRIVATE KEY"},
		{"not a CA", writePEM(t, dir, "leaf.pem", leafCert), writePEM(t, dir, "leaf-key.pem", leafKey), "is not a CA certificate"},
		{"CA without certSign", writePEM(t, dir, "nosign.pem", noSignCert), writePEM(t, dir, "nosign-key.pem", noSignKey), "without the certSign key usage"},
		{"expired", writePEM(t, dir, "exp.pem", expCert), writePEM(t, dir, "exp-key.pem", expKey), "expired on"},
		{"not yet valid", writePEM(t, dir, "fut.pem", futCert), writePEM(t, dir, "fut-key.pem", futKey), "is not valid before"},
		{"key mismatch", goodCert, otherKey, "does not match certificate"},
		{"sec1 key mismatch", goodCert, writePEM(t, dir, "sec1.pem", &pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), "does not match certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.cert, tt.key)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadSEC1AndBundle(t *testing.T) {
	dir := t.TempDir()
	cb, kb := makeCert(t, &x509.Certificate{NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	k, _ := x509.ParsePKCS8PrivateKey(kb.Bytes)
	sec1, _ := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	// A combined file: parameters block first, then the key, then the cert.
	combined := writePEM(t, dir, "all.pem", &pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8}},
		&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}, cb)
	c, err := Load(combined, combined)
	if err != nil {
		t.Fatal(err)
	}
	// CertPEM is only the certificate, never the key sharing its file.
	if strings.Contains(string(c.CertPEM()), "PRIVATE KEY") {
		t.Fatal("CertPEM carries the key")
	}
}

// verify checks leaf against roots the way a TLS client would.
func verify(leaf *x509.Certificate, host string, roots *x509.CertPool) error {
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func TestLeafChains(t *testing.T) {
	c := newTestCA(t)
	other := newTestCA(t)
	lc := NewLeafCache(c, 0)
	cert, err := lc.Get("API.Example.com.")
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if len(cert.Certificate) != 1 || leaf == nil || cert.PrivateKey == nil {
		t.Fatalf("tls.Certificate %+v", cert)
	}
	ours := x509.NewCertPool()
	ours.AddCert(c.cert)
	if err := verify(leaf, "api.example.com", ours); err != nil {
		t.Errorf("does not chain to our CA: %v", err)
	}
	if err := verify(leaf, "other.example.com", ours); err == nil {
		t.Error("valid for another name")
	}
	theirs := x509.NewCertPool()
	theirs.AddCert(other.cert)
	if err := verify(leaf, "api.example.com", theirs); err == nil {
		t.Error("chains to another CA")
	}
	if err := verify(leaf, "api.example.com", x509.NewCertPool()); err == nil {
		t.Error("chains to an empty pool")
	}
	if sys, err := x509.SystemCertPool(); err == nil {
		if err := verify(leaf, "api.example.com", sys); err == nil {
			t.Error("chains to the system roots")
		}
	}
	if got := leaf.DNSNames; len(got) != 1 || got[0] != "api.example.com" || len(leaf.IPAddresses) != 0 {
		t.Errorf("SANs %v %v", got, leaf.IPAddresses)
	}
	if leaf.IsCA || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("usage: IsCA=%v EKU=%v", leaf.IsCA, leaf.ExtKeyUsage)
	}
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("leaf key %T", leaf.PublicKey)
	}
	now := time.Now()
	if d := now.Sub(leaf.NotBefore); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("NotBefore %v ago", d)
	}
	if d := leaf.NotAfter.Sub(now); d < 23*time.Hour || d > 24*time.Hour+time.Minute {
		t.Errorf("NotAfter in %v", d)
	}
	// Usable by crypto/tls end to end.
	if _, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		mustKeyPEM(t, cert.PrivateKey.(*ecdsa.PrivateKey))); err != nil {
		t.Errorf("X509KeyPair: %v", err)
	}
}

func mustKeyPEM(t *testing.T, k *ecdsa.PrivateKey) []byte {
	b, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b})
}

func TestLeafIP(t *testing.T) {
	c := newTestCA(t)
	lc := NewLeafCache(c, 0)
	pool := x509.NewCertPool()
	pool.AddCert(c.cert)
	for host, want := range map[string]string{"203.0.113.7": "203.0.113.7", "[2001:db8::1]": "2001:db8::1", "::ffff:192.0.2.1": "192.0.2.1"} {
		cert, err := lc.Get(host)
		if err != nil {
			t.Fatal(err)
		}
		leaf := cert.Leaf
		if len(leaf.DNSNames) != 0 || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP(want)) {
			t.Errorf("%s: SANs %v %v", host, leaf.DNSNames, leaf.IPAddresses)
		}
		if err := verify(leaf, want, pool); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}

func TestLeafBadHosts(t *testing.T) {
	lc := NewLeafCache(newTestCA(t), 0)
	for _, h := range []string{"", ".", "a..b", "*.example.com", "exa mple.com", "bücher.example", "fe80::1%eth0",
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "com"} {
		if _, err := lc.Get(h); err == nil {
			t.Errorf("Get(%q) succeeded", h)
		}
	}
	if lc.leaves.Len() != 0 {
		t.Error("bad hosts cached")
	}
}

func TestLeafCacheHitAndLRU(t *testing.T) {
	lc := NewLeafCache(newTestCA(t), 3)
	a1, _ := lc.Get("a.example")
	a2, _ := lc.Get("A.EXAMPLE.")
	if a1 != a2 || lc.mints.Load() != 1 {
		t.Fatalf("cache miss on a hit: %d mints", lc.mints.Load())
	}
	lc.Get("b.example")
	lc.Get("c.example")
	lc.Get("a.example") // a is now the most recent; b the least
	lc.Get("d.example") // evicts b
	if lc.leaves.Len() != 3 {
		t.Fatalf("Len = %d", lc.leaves.Len())
	}
	mints := lc.mints.Load()
	if a3, _ := lc.Get("a.example"); a3 != a1 || lc.mints.Load() != mints {
		t.Error("a was evicted")
	}
	if _, _ = lc.Get("b.example"); lc.mints.Load() != mints+1 {
		t.Error("b was not evicted")
	}
	for i := range 50 {
		lc.Get(fmt.Sprintf("h%d.example", i))
	}
	if lc.leaves.Len() != 3 {
		t.Fatalf("Len = %d after many hosts", lc.leaves.Len())
	}
}

func TestLeafConcurrentMintsOnce(t *testing.T) {
	lc := NewLeafCache(newTestCA(t), 0)
	const n = 64
	var wg sync.WaitGroup
	start := make(chan struct{})
	certs := make([]*tls.Certificate, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := lc.Get("burst.example.com")
			if err != nil {
				t.Error(err)
			}
			certs[i] = c
		}()
	}
	close(start)
	wg.Wait()
	if got := lc.mints.Load(); got != 1 {
		t.Errorf("minted %d times", got)
	}
	for _, c := range certs {
		if c != certs[0] {
			t.Fatal("different certificates for one host")
		}
	}
}

func TestLeafRenewsNearExpiry(t *testing.T) {
	lc := NewLeafCache(newTestCA(t), 0)
	now := time.Now()
	lc.now = func() time.Time { return now }
	first, _ := lc.Get("x.example")
	now = now.Add(22*time.Hour + 59*time.Minute)
	if c, _ := lc.Get("x.example"); c != first {
		t.Error("reminted too early")
	}
	now = now.Add(2 * time.Minute) // < 1h left
	second, _ := lc.Get("x.example")
	if second == first || lc.leaves.Len() != 1 || lc.mints.Load() != 2 {
		t.Errorf("not reminted near expiry: mints %d", lc.mints.Load())
	}
}

func TestLeafNotAfterCappedByCA(t *testing.T) {
	c := newTestCA(t)
	lc := NewLeafCache(c, 0)
	lc.now = func() time.Time { return c.cert.NotAfter.Add(-3 * time.Hour) }
	cert, err := lc.Get("x.example")
	if err != nil {
		t.Fatal(err)
	}
	if !cert.Leaf.NotAfter.Equal(c.cert.NotAfter) {
		t.Errorf("leaf NotAfter %v, CA %v", cert.Leaf.NotAfter, c.cert.NotAfter)
	}
	lc.now = func() time.Time { return c.cert.NotAfter.Add(time.Second) }
	if _, err := lc.Get("y.example"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("err = %v", err)
	}
}

func TestLeafRetain(t *testing.T) {
	lc := NewLeafCache(newTestCA(t), 0)
	for _, h := range []string{"keep.example", "drop.example", "10.0.0.1", "also.keep.example"} {
		if _, err := lc.Get(h); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	lc.Retain(func(h string) bool { seen = append(seen, h); return strings.HasSuffix(h, "keep.example") })
	if lc.leaves.Len() != 2 || len(seen) != 4 {
		t.Fatalf("Len = %d, seen %v", lc.leaves.Len(), seen)
	}
	mints := lc.mints.Load()
	lc.Get("keep.example")
	if lc.mints.Load() != mints {
		t.Error("kept leaf reminted")
	}
	lc.Get("drop.example")
	if lc.mints.Load() != mints+1 {
		t.Error("dropped leaf still cached")
	}
}

func BenchmarkLeafCold(b *testing.B) {
	lc := NewLeafCache(newTestCA(b), 0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := lc.mint(fmt.Sprintf("h%d.example.com", i), netip.Addr{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkLeafCacheHit(b *testing.B) {
	lc := NewLeafCache(newTestCA(b), 0)
	if _, err := lc.Get("hot.example.com"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := lc.Get("hot.example.com"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLeafMemory reports the heap held per cached leaf, as the
// bytes/leaf metric.
func BenchmarkLeafMemory(b *testing.B) {
	const n = 1000
	c := newTestCA(b)
	for b.Loop() {
		lc := NewLeafCache(c, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			if _, err := lc.Get(fmt.Sprintf("host-%04d.subdomain.example.com", i)); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if lc.leaves.Len() != n {
			b.Fatalf("Len = %d", lc.leaves.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/leaf")
		runtime.KeepAlive(lc)
	}
}
