// Command receiver is an example HTTPS hook receiver for hookgate: the
// server that hooks.json HTTP hooks post to in the docker-compose demo
// (docs/deploy.md).
//
//   - POST /api/v1/pre-tool: a security gate. It answers the decision JSON,
//     denying code_execution calls whose arguments contain `rm -rf` (or a
//     flag-order variant such as `rm -fr`), allowing everything else.
//   - POST /api/v1/agent-events: audit logging. One JSON log line per event
//     (tool name, environment_id, error), answered with {"decision":"allow"}.
//   - GET /healthz: liveness, no token needed.
//
// Every /api route requires `Authorization: Bearer <RECEIVER_TOKEN>`. The
// sandbox never has that token: the gateway injects it (an allowlist
// transform), so a 401 here means the request did not come through the
// gateway. The token is compared in constant time and never logged.
//
// TLS: with -cert and -key naming existing files, those are served.
// Otherwise the receiver uses (or, on first start, creates) a self-signed
// ECDSA certificate for -hostnames in -cert-dir, as cert.pem (0644) and
// key.pem (0600); the gateway trusts cert.pem through upstream.ca_file.
//
// Flags fall back to environment variables: RECEIVER_LISTEN,
// RECEIVER_TLS_CERT, RECEIVER_TLS_KEY, RECEIVER_CERT_DIR,
// RECEIVER_HOSTNAMES. RECEIVER_TOKEN is required and is read only from the
// environment.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := zerolog.New(os.Stderr).With().Timestamp().Str("service", "receiver").Logger()
	if err := run(ctx, os.Args[1:], os.Getenv, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		log.Error().Err(err).Msg("receiver failed")
		os.Exit(1)
	}
}

type options struct {
	listen    string
	certFile  string
	keyFile   string
	certDir   string
	hostnames []string
	token     string
}

func parseOptions(args []string, getenv func(string) string, out io.Writer) (options, error) {
	def := func(env, fallback string) string {
		if v := getenv(env); v != "" {
			return v
		}
		return fallback
	}
	fs := flag.NewFlagSet("receiver", flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	var hostnames string
	fs.StringVar(&o.listen, "listen", def("RECEIVER_LISTEN", ":8443"), "listen `address` (env RECEIVER_LISTEN)")
	fs.StringVar(&o.certFile, "cert", def("RECEIVER_TLS_CERT", ""), "TLS certificate `file` (PEM); with -key, served as is (env RECEIVER_TLS_CERT)")
	fs.StringVar(&o.keyFile, "key", def("RECEIVER_TLS_KEY", ""), "TLS key `file` (PEM) (env RECEIVER_TLS_KEY)")
	fs.StringVar(&o.certDir, "cert-dir", def("RECEIVER_CERT_DIR", "receiver-tls"), "`dir`ectory for the self-signed cert.pem/key.pem used when -cert/-key are not given or missing (env RECEIVER_CERT_DIR)")
	fs.StringVar(&hostnames, "hostnames", def("RECEIVER_HOSTNAMES", "telemetry.example.com,localhost,127.0.0.1"), "comma-separated names and IPs for the self-signed certificate (env RECEIVER_HOSTNAMES)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, h := range strings.Split(hostnames, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.hostnames = append(o.hostnames, h)
		}
	}
	o.token = getenv("RECEIVER_TOKEN")
	if o.token == "" {
		return o, errors.New("RECEIVER_TOKEN is not set: it must hold the bearer token the gateway injects")
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, log zerolog.Logger) error {
	o, err := parseOptions(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	cert, source, err := loadOrCreateCert(o.certFile, o.keyFile, o.certDir, o.hostnames, time.Now())
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              o.listen,
		Handler:           newRouter(o.token, log),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	log.Info().Str("listen", o.listen).Str("cert", source).Strs("hostnames", o.hostnames).Msg("receiver listening")

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	log.Info().Msg("receiver stopped")
	return nil
}
