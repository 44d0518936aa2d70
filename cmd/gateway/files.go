package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/roots"
)

// gatewayFiles are what a gateway reads besides its config file: its CA,
// the roots it verifies upstreams with, and the admin token. `serve` and
// `check` both open them with openGatewayFiles, so check says OK only for a
// config that serve starts with.
type gatewayFiles struct {
	leaves *ca.LeafCache // nil without a CA
	caPEM  []byte
	roots  *x509.CertPool
	token  string // "" without admin.token_file
}

// openGatewayFiles opens every file cfg names (and extraCA, the
// --upstream-ca flag's file). The error lists every file that cannot be
// used, each as "config: field: problem".
func openGatewayFiles(cfg *config.Config, extraCA string) (*gatewayFiles, error) {
	var f gatewayFiles
	var errs []error
	fail := func(field string, err error) {
		errs = append(errs, &config.Error{File: cfg.File, Field: field, Msg: err.Error()})
	}
	var err error
	if f.leaves, f.caPEM, err = loadCA(cfg); err != nil {
		fail("ca", err)
	}
	f.roots = roots.System()
	for _, r := range []struct{ field, file string }{{"upstream.ca_file", cfg.UpstreamCAFile}, {"--upstream-ca", extraCA}} {
		if err := roots.AddFile(f.roots, r.file); err != nil {
			fail(r.field, err)
		}
	}
	if f.token, err = readToken(cfg.AdminTokenFile); err != nil {
		fail("admin.token_file", err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &f, nil
}

// loadCA loads the gateway's CA when the config names one.
func loadCA(cfg *config.Config) (*ca.LeafCache, []byte, error) {
	if cfg.CACertFile == "" {
		return nil, nil, nil
	}
	for _, file := range []string{cfg.CACertFile, cfg.CAKeyFile} {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s does not exist; create the CA with: %s", file, caInitHint(cfg))
		}
	}
	authority, err := ca.Load(cfg.CACertFile, cfg.CAKeyFile)
	if err != nil {
		return nil, nil, errors.New(strings.TrimPrefix(err.Error(), "ca: "))
	}
	return ca.NewLeafCache(authority, 0), authority.CertPEM(), nil
}

// caInitHint is the command that makes the CA files the config names.
func caInitHint(cfg *config.Config) string {
	dir := filepath.Dir(cfg.CACertFile)
	if filepath.Base(cfg.CACertFile) == ca.CertFileName && filepath.Base(cfg.CAKeyFile) == ca.KeyFileName && filepath.Dir(cfg.CAKeyFile) == dir {
		return "gateway ca init --dir " + shellQuote(dir)
	}
	return fmt.Sprintf("gateway ca init --dir <dir> (it writes <dir>/%s and <dir>/%s; point ca.cert_file and ca.key_file at them)", ca.CertFileName, ca.KeyFileName)
}

// readToken reads the admin API's bearer token file; "" when none is set.
func readToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	return string(b), nil
}
