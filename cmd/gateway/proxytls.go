package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"github.com/hookgate/hookgate/config"
)

// proxyTLSListener makes the explicit listener speak TLS
// (listen.proxy_tls): the gateway's certificate, and a client certificate
// from the configured CA required of every client, whose name selects its
// tenant.
func proxyTLSListener(ln net.Listener, pt *config.ProxyTLS) (net.Listener, error) {
	cfg, err := proxyTLSConfig(pt)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, cfg), nil
}

func proxyTLSConfig(pt *config.ProxyTLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(pt.CertFile, pt.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("listen.proxy_tls: the certificate and key: %w", err)
	}
	pemBytes, err := os.ReadFile(pt.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("listen.proxy_tls.client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("listen.proxy_tls.client_ca_file: %s holds no PEM certificate", pt.ClientCAFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}
