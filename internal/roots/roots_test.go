package roots

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed CA certificate as PEM and returns the file
// and the parsed certificate.
func selfSigned(t *testing.T) (string, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "roots test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, cert
}

func TestAddFileTrustsItsCertificates(t *testing.T) {
	file, cert := selfSigned(t)
	pool := System()
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err == nil {
		t.Fatal("the test CA is trusted before it was added")
	}
	if err := AddFile(pool, file); err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the added CA is not trusted: %v", err)
	}
	// Each System call is a fresh pool: adding to one does not change others.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: System()}); err == nil {
		t.Error("a later System pool trusts the CA added to an earlier one")
	}
}

func TestAddFileErrors(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(notPEM, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for file, want := range map[string]string{
		notPEM:  notPEM + " holds no PEM certificate",
		missing: "no such file or directory",
	} {
		err := AddFile(System(), file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("AddFile(%s) = %v, want %q", file, err, want)
		}
	}
	if err := AddFile(System(), ""); err != nil {
		t.Errorf(`AddFile("") = %v, want nil`, err)
	}
}
