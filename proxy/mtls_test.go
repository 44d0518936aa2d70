package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testCert issues a certificate (a CA when parent is nil) for name.
func testCert(t *testing.T, name string, parent *tls.Certificate, isCA bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IsCA:         isCA, BasicConstraintsValid: true,
		DNSNames: []string{name},
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
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// TestMTLSSelectsTenant: on a TLS proxy listener that requires client
// certificates, the certificate's name selects the tenant, ahead of any
// Proxy-Authorization; a certificate of no tenant is unidentified; a
// client without a certificate never gets a request in.
func TestMTLSSelectsTenant(t *testing.T) {
	text := strings.Replace(fmt.Sprintf(tenantYAML, "true"), "    clients: [127.0.0.3/32]\n", "    clients: [127.0.0.3/32]\n    client_certs: [sandbox-b.test]\n", 1)
	e := newTenantGatewayText(t, text)
	clientCA := testCert(t, "client-ca", nil, true)
	serverCert := testCert(t, "gateway.test", nil, false)
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.Leaf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	srv, err := New(Options{Policy: e.gw.srv.Policy(), Resolver: e.gw.resolver, Logger: e.gw.srv.log, Leaves: e.gw.srv.leaves})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	serverPool := x509.NewCertPool()
	serverPool.AddCert(serverCert.Leaf)

	send := func(cert *tls.Certificate, proxyAuth string) (int, error) {
		cfg := &tls.Config{RootCAs: serverPool, ServerName: "gateway.test"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if proxyAuth != "" {
			proxyAuth = "Proxy-Authorization: " + proxyAuth + "\r\n"
		}
		fmt.Fprintf(c, "GET http://api.example.com:%s/ HTTP/1.1\r\nHost: api.example.com\r\n%sConnection: close\r\n\r\n", e.plain.port(), proxyAuth)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	b := testCert(t, "sandbox-b.test", &clientCA, false)
	if code, err := send(&b, ""); err != nil || code != 200 || lastAuth(t, e.plain) != "Bearer "+tokenB {
		t.Fatalf("team-b's certificate: %d %v", code, err)
	}
	// The certificate wins over a header naming another tenant.
	if code, err := send(&b, basicHeader("team-a", passA)); err != nil || code != 200 || lastAuth(t, e.plain) != "Bearer "+tokenB {
		t.Fatalf("team-b's certificate with team-a's password: %d %v", code, err)
	}
	other := testCert(t, "sandbox-z.test", &clientCA, false)
	if code, err := send(&other, ""); err != nil || code != http.StatusProxyAuthRequired {
		t.Fatalf("a certificate of no tenant: %d %v", code, err)
	}
	n := len(e.plain.requests())
	if code, err := send(nil, basicHeader("team-a", passA)); err == nil {
		t.Fatalf("no client certificate: status %d, want a failed handshake", code)
	}
	if len(e.plain.requests()) != n {
		t.Fatal("a client without a certificate reached the upstream")
	}
}
