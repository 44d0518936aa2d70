package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// defaultCADir is where 'gateway ca' keeps the CA when --dir is not given.
const defaultCADir = "hookgate-ca"

const caUsage = `usage: gateway ca <subcommand> [flags]

Manage the gateway's own certificate authority, which signs the certificates
the gateway presents when it injects credentials (allowlist entries with a
transform). The sandbox trusts the certificate (ca.pem); the key
(ca-key.pem) must never be mounted into a sandbox.

subcommands:
  init   create a new CA: <dir>/ca.pem and <dir>/ca-key.pem (never overwrites)
  cert   print the CA certificate (PEM) to stdout, to install in a sandbox

Both take --dir (default "./` + defaultCADir + `").
Run 'gateway ca <subcommand> --help' for details.
`

// runCA implements 'gateway ca init' and 'gateway ca cert'.
func runCA(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, caUsage)
		return fmt.Errorf("%w: ca: no subcommand given (init or cert)", errUsage)
	}
	switch args[0] {
	case "init":
		return runCAInit(ctx, args[1:], stdout, stderr)
	case "cert":
		return runCACert(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, caUsage)
		return nil
	default:
		fmt.Fprint(stderr, caUsage)
		return fmt.Errorf("%w: ca: unknown subcommand %q (want init or cert)", errUsage, args[0])
	}
}

func runCAInit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ca init", "Create a new CA (ECDSA P-256, valid 10 years) as <dir>/ca.pem and <dir>/ca-key.pem.\n"+
		"The directory is created with mode 0700 if missing; the key is written with mode 0600.\n"+
		"Existing files are never overwritten.", stderr)
	dir := fs.String("dir", defaultCADir, "directory for ca.pem and ca-key.pem")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: ca init: unexpected arguments %q", errUsage, fs.Args())
	}
	certPath, keyPath, err := ca.Init(*dir)
	if err != nil {
		return err
	}
	if abs, err := filepath.Abs(certPath); err == nil {
		certPath = abs
	}
	if abs, err := filepath.Abs(keyPath); err == nil {
		keyPath = abs
	}
	name := ""
	if cert, err := ca.ReadCertificate(certPath); err == nil {
		name = fmt.Sprintf(" %q", cert.Subject.CommonName)
	}
	fmt.Fprintf(stdout, `created CA%s
  certificate: %s
  private key: %s  (mode 0600: keep it on the gateway host, never in a sandbox)

next steps:
  1. Point the gateway at them in its config:
       ca:
         cert_file: %s
         key_file: %s
  2. Make the sandbox trust the certificate (only ca.pem, never the key), e.g. on Debian/Ubuntu:
       cp ca.pem /usr/local/share/ca-certificates/hookgate-ca.crt && update-ca-certificates
     and for runtimes with their own trust store:
       NODE_EXTRA_CA_CERTS=/path/to/ca.pem
       REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt  SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  Print the certificate again at any time with: gateway ca cert --dir %s
`, name, certPath, keyPath, certPath, keyPath, shellQuote(*dir))
	return nil
}

func runCACert(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ca cert", "Print the CA certificate (PEM) to stdout, to install in a sandbox's trust store.\n"+
		"Only the certificate is printed, never the key.", stderr)
	dir := fs.String("dir", defaultCADir, "directory holding ca.pem (as created by 'gateway ca init')")
	configFile := fs.String("config", "", "gateway config `file`: print its ca.cert_file (takes precedence over --dir)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: ca cert: unexpected arguments %q", errUsage, fs.Args())
	}
	certPath := filepath.Join(*dir, ca.CertFileName)
	if *configFile != "" {
		cfg, err := config.Load(*configFile, config.Options{Transform: secretsNotNeeded()})
		if err != nil {
			return err
		}
		if cfg.CACertFile == "" {
			return fmt.Errorf("%s: ca.cert_file is not set", *configFile)
		}
		certPath = cfg.CACertFile
	}

	cert, err := ca.ReadCertificate(certPath)
	if err != nil {
		return err
	}
	// Re-encode from the parsed certificate: whatever else the file holds
	// (a key, comments) is never printed.
	_, err = stdout.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	return err
}

// secretsNotNeeded resolves every ${env:} and ${file:} reference of a
// transform to a placeholder: commands that only read the CA (ca cert) must
// work on a host, or at a moment, where the transform's secrets are not set.
// The values are never used.
func secretsNotNeeded() transform.Options {
	return transform.Options{
		LookupEnv: func(string) (string, bool) { return "unused", true },
		ReadFile:  func(string) ([]byte, error) { return []byte("unused"), nil },
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
