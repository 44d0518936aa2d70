package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/ca"
)

func TestCAInitAndCert(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var out, errOut bytes.Buffer
	if err := runCA(context.Background(), []string{"init", "--dir", dir}, nil, &out, &errOut); err != nil {
		t.Fatalf("init: %v\n%s", err, errOut.String())
	}
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	for _, want := range []string{certPath, keyPath, "cert_file: " + certPath, "key_file: " + keyPath, "update-ca-certificates", "gateway ca cert --dir " + dir} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("init output lacks %q:\n%s", want, out.String())
		}
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key: %v %v", fi, err)
	}

	// A second init refuses and leaves the files alone.
	before, _ := os.ReadFile(keyPath)
	out.Reset()
	err := runCA(context.Background(), []string{"init", "--dir", dir}, nil, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second init: %v", err)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Error("key overwritten")
	}

	out.Reset()
	if err := runCA(context.Background(), []string{"cert", "--dir", dir}, nil, &out, &errOut); err != nil {
		t.Fatalf("cert: %v", err)
	}
	block, rest := pem.Decode(out.Bytes())
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("cert output is not one PEM certificate:\n%s", out.String())
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !cert.IsCA || !strings.HasPrefix(cert.Subject.CommonName, "hookgate CA ") {
		t.Fatalf("parsed %v, %v", cert, err)
	}
	if strings.Contains(out.String(), "PRIVATE KEY") {
		t.Fatal("cert printed the key")
	}
}

func TestCAUsageErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{nil, {"bogus"}, {"init", "extra"}, {"cert", "--nope"}} {
		err := runCA(context.Background(), args, nil, &out, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("%q: err = %v, want a usage error", args, err)
		}
	}
	err := runCA(context.Background(), []string{"cert", "--dir", t.TempDir()}, nil, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("cert without CA: %v", err)
	}
	var ee *exitError
	if err := runCA(context.Background(), []string{"init", "--help"}, nil, &out, &errOut); !errors.As(err, &ee) || ee.code != 0 {
		t.Errorf("--help: %v", err)
	}
}

// TestCACertFromConfigNeedsNoSecrets: `ca cert --config` reads only the CA,
// so a transform whose secrets are not available here must not stop it.
func TestCACertFromConfigNeedsNoSecrets(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ca.Init(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, `network:
  allowlist:
    - domain: telemetry.example.com
      transform:
        Authorization: "Bearer ${env:HOOKGATE_TEST_SURELY_UNSET}"
        X-Key: "${file:no-such-secret}"
ca:
  cert_file: ca/ca.pem
  key_file: ca/ca-key.pem
`)
	var out, errOut bytes.Buffer
	if err := runCA(context.Background(), []string{"cert", "--config", cfg}, nil, &out, &errOut); err != nil {
		t.Fatalf("ca cert --config: %v\n%s", err, errOut.String())
	}
	want, err := os.ReadFile(filepath.Join(dir, "ca", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(out.Bytes()), bytes.TrimSpace(want)) {
		t.Fatalf("printed:\n%s\nwant the CA certificate:\n%s", out.String(), want)
	}
	if strings.Contains(out.String(), "unused") {
		t.Fatal("a placeholder secret reached the output")
	}
}
