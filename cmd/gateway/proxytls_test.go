package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// issue makes a certificate for name, signed by parent (self-signed when
// nil), and writes it and its key as PEM files; it returns it for signing
// and for clients.
func issue(t *testing.T, dir, name string, parent *tls.Certificate, isCA bool) (tls.Certificate, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IsCA:        isCA, BasicConstraintsValid: true, DNSNames: []string{name},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses, tmpl.DNSNames = []net.IP{ip}, nil
	}
	signer, signerKey := tmpl, any(key)
	if parent != nil {
		signer, signerKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writeFile(t, certPath, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyPath, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, certPath, keyPath
}

// TestServeProxyTLS: `serve` with listen.proxy_tls speaks TLS on the proxy
// port and selects the tenant by the client certificate; a client with an
// https:// proxy URL and its certificate gets its tenant's policy.
func TestServeProxyTLS(t *testing.T) {
	e := newOpsEnv(t)
	dir := t.TempDir()
	clientCA, clientCAPath, _ := issue(t, dir, "client-ca", nil, true)
	_, gwCert, gwKey := issue(t, dir, "127.0.0.1", nil, false)
	cert, _, _ := issue(t, dir, "sandbox-a.test", &clientCA, false)
	config := e.config("example.com") + `auth: {required: true}
tenants:
  - name: team-a
    client_certs: [sandbox-a.test]
    network:
      allowlist:
        - domain: inject.example.com
          transform: {Authorization: "Bearer ${env:HG_OPS_TOKEN}"}
`
	config = strings.Replace(config, "network:\n", fmt.Sprintf("listen: {proxy_tls: {cert_file: %q, key_file: %q, client_ca_file: %q}}\nnetwork:\n", gwCert, gwKey, clientCAPath), 1)
	sg := serveInProcess(t, config, e.args()...)

	pool := e.pool.Clone()
	gwPEM, err := os.ReadFile(gwCert)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(gwPEM)
	client := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{
			Proxy:             http.ProxyURL(&url.URL{Scheme: "https", Host: sg.proxyAddr}),
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: certs},
			DisableKeepAlives: true,
		}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	if code, body := get(t, client(cert), e.url("inject.example.com", "/")); code != 200 || !strings.Contains(body, "[redacted]") {
		t.Fatalf("team-a's certificate: %d %s", code, body)
	}
	if code, _ := get(t, client(cert), e.url("example.com", "/")); code != 0 {
		t.Fatalf("team-a to a host off its allowlist: %d", code)
	}
	if code, _ := get(t, client(), e.url("inject.example.com", "/")); code != 0 {
		t.Fatalf("no client certificate: %d, want no answer", code)
	}
	lines := sg.logLines(t, "decision")
	if len(lines) == 0 || lines[0]["tenant"] != "team-a" {
		t.Fatalf("decision lines: %v", lines)
	}
}
