package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Names of the self-signed certificate and its key inside the cert dir.
const (
	certFileName = "cert.pem"
	keyFileName  = "key.pem"
)

// loadOrCreateCert returns the certificate to serve and where it came from.
// certFile and keyFile are used when both are given and exist; otherwise
// cert.pem and key.pem in dir are reused when present, or created: a
// self-signed ECDSA P-256 certificate for hostnames (IP literals become IP
// SANs), valid for a year. The certificate is its own root, so a client
// trusts it by adding cert.pem to its roots (the gateway: upstream.ca_file).
func loadOrCreateCert(certFile, keyFile, dir string, hostnames []string, now time.Time) (tls.Certificate, string, error) {
	if certFile != "" && keyFile != "" && exists(certFile) && exists(keyFile) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		return c, certFile, err
	}
	if dir == "" {
		return tls.Certificate{}, "", errors.New("no TLS certificate: give -cert and -key, or -cert-dir for a self-signed one")
	}
	certPath, keyPath := filepath.Join(dir, certFileName), filepath.Join(dir, keyFileName)
	if exists(certPath) && exists(keyPath) {
		c, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err == nil && certCovers(c, hostnames, now) {
			return c, certPath + " (reused)", nil
		}
		// Unreadable, expired or for other names: make a new one.
	}
	if len(hostnames) == 0 {
		return tls.Certificate{}, "", errors.New("self-signed certificate: no hostnames given")
	}
	certPEM, keyPEM, err := selfSigned(hostnames, now)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tls.Certificate{}, "", err
	}
	// Key first, certificate last, each by rename: a reader that sees
	// cert.pem (the gateway, via a shared volume) sees a complete file.
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, "", err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, "", err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	return c, certPath + " (created)", err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// certCovers reports whether c is valid at now (with a day to spare) and
// names every hostname.
func certCovers(c tls.Certificate, hostnames []string, now time.Time) bool {
	if len(c.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil || now.Before(leaf.NotBefore) || now.Add(24*time.Hour).After(leaf.NotAfter) {
		return false
	}
	for _, h := range hostnames {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func selfSigned(hostnames []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: hostnames[0], Organization: []string{"hookgate example receiver"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // self-signed: it is its own trust anchor
		MaxPathLenZero:        true,
	}
	for _, h := range hostnames {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// writeAtomic writes data to a temporary file in path's directory with mode
// perm, then renames it over path.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
