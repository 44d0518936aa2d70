// Package ca is hookgate's own certificate authority: creating it on disk
// (Init), loading it (Load), and minting the short-lived leaf certificates
// the gateway presents when it terminates TLS for an allowlist entry with a
// transform (LeafCache).
//
// The CA key signs certificates that every sandbox trusts: it must never be
// mounted into a sandbox. Only ca.pem (the certificate) goes there.
package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// File names Init writes in its directory.
const (
	CertFileName = "ca.pem"
	KeyFileName  = "ca-key.pem"
)

// caValidity is the lifetime of a CA made by Init.
const caValidity = 10 * 365 * 24 * time.Hour

// Init creates an ECDSA P-256 CA in dir: dir/ca.pem (the certificate, mode
// 0644) and dir/ca-key.pem (PKCS#8 "PRIVATE KEY", mode 0600). It creates dir
// with mode 0700 if it is missing, and refuses to overwrite either file. It
// returns the two paths.
func Init(dir string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("ca init: %s already exists; refusing to overwrite it", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("ca init: %w", err)
		}
	}
	certPEM, keyPEM, err := newCA(time.Now())
	if err != nil {
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	// Key first: if it cannot be written, no certificate without a key is
	// left behind. O_EXCL closes the race with a concurrent init.
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	if err := writeNew(certPath, certPEM, 0o644); err != nil {
		_ = os.Remove(keyPath)
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	return certPath, keyPath, nil
}

// writeNew writes a file that must not exist yet, with exactly mode perm.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already exists; refusing to overwrite it", path)
	}
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil { // the umask may have narrowed it
		f.Close()
		os.Remove(path)
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// newCA generates a CA certificate and key, PEM-encoded.
func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "hookgate CA " + hex.EncodeToString(suffix),
			Organization: []string{"hookgate"},
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		// SubjectKeyId is derived from the key by CreateCertificate.
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// CA is a loaded certificate authority: its certificate and signing key.
// It is immutable and safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// Load reads a CA certificate (PEM) and its private key (PEM: PKCS#8
// "PRIVATE KEY", or SEC 1 "EC PRIVATE KEY" / PKCS#1 "RSA PRIVATE KEY" for a
// CA made elsewhere). It fails with a clear message when a file is missing,
// the certificate is not a CA, is expired or not yet valid, or the key does
// not belong to the certificate.
func Load(certFile, keyFile string) (*CA, error) {
	cert, err := ReadCertificate(certFile)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("ca: certificate %s expired on %s; create a new CA with 'gateway ca init'",
			certFile, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(cert.NotBefore) {
		return nil, fmt.Errorf("ca: certificate %s is not valid before %s (check the clock)",
			certFile, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	key, err := readKey(keyFile)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("ca: key %s does not match certificate %s", keyFile, certFile)
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:     key,
	}, nil
}

// ReadCertificate reads the first certificate of a PEM file and checks that
// it is a CA certificate that may sign server certificates. It does not
// check validity dates. (For 'gateway ca cert', which needs no key.)
func ReadCertificate(certFile string) (*x509.Certificate, error) {
	data, err := readFile("certificate", certFile)
	if err != nil {
		return nil, err
	}
	var block *pem.Block
	for rest := data; ; {
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("ca: %s holds no PEM CERTIFICATE block", certFile)
		}
		if block.Type == "CERTIFICATE" {
			break
		}
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", certFile, err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("ca: %s is not a CA certificate (basic constraints CA:TRUE missing)", certFile)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("ca: %s is a CA certificate without the certSign key usage", certFile)
	}
	return cert, nil
}

func readFile(what, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("ca: %s file %s does not exist (create a CA with 'gateway ca init')", what, path)
	case err != nil:
		return nil, fmt.Errorf("ca: reading %s: %w", what, err)
	}
	return data, nil
}

// readKey reads a private key PEM file. Errors never include key material.
func readKey(keyFile string) (crypto.Signer, error) {
	data, err := readFile("key", keyFile)
	if err != nil {
		return nil, err
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("ca: %s holds no PEM private key block", keyFile)
		}
		var key any
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ca: %s: cannot parse %s", keyFile, block.Type)
		}
		switch k := key.(type) {
		case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
			return k.(crypto.Signer), nil
		default:
			return nil, fmt.Errorf("ca: %s: unsupported key type %T", keyFile, key)
		}
	}
}

// CertPEM returns the CA certificate, PEM-encoded: what sandboxes trust.
func (c *CA) CertPEM() []byte { return bytes.Clone(c.certPEM) }
