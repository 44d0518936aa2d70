package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/configs"
	"github.com/hookgate/hookgate/proxy"
)

// shutdownGrace is how long serve lets requests and tunnels in flight finish
// after SIGTERM/SIGINT before closing them.
const shutdownGrace = 10 * time.Second

func runServe(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "Run the egress gateway. Without --config it serves the built-in\ndefault (configs/gateway.yaml): the public internet only.", stdout)
	configFile := fs.String("config", "", "gateway config `file` (YAML or JSON); default: the built-in configs/gateway.yaml")
	listen := fs.String("listen", "", "explicit proxy listen `address`, overriding listen.proxy")
	upstreamCA := fs.String("upstream-ca", "", "extra root certificates `file` (PEM) for upstream TLS, on top of upstream.ca_file")
	var testAllow stringList
	fs.Var(&testAllow, "test-allow-upstream", "FOR TESTS ONLY: exempt exactly this `IP:PORT` from the address policy (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", errUsage, fs.Args())
	}

	cfg, err := loadConfig(*configFile)
	if err != nil {
		return err
	}
	if *listen != "" {
		if err := config.ValidateListen(*listen); err != nil {
			return fmt.Errorf("%w: --listen: %v", errUsage, err)
		}
		cfg.ProxyListen = *listen
	}
	exempt, err := parseExemptions(testAllow)
	if err != nil {
		return err
	}
	logger := zerolog.New(stderr).Level(cfg.LogLevel).With().Timestamp().Logger()
	for _, ap := range exempt {
		logger.Warn().Str("upstream", ap.String()).
			Msg("TEST MODE: --test-allow-upstream exempts this address from the address policy; never use it in production")
	}

	ln, err := net.Listen("tcp", cfg.ProxyListen)
	if err != nil {
		return fmt.Errorf("listen.proxy: %w", err)
	}
	defer ln.Close()

	addrs, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{
		AllowCIDRs: cfg.AllowCIDRs,
		Own:        ownAddresses(ln.Addr()),
		Exempt:     exempt,
	})
	if err != nil {
		return err
	}
	roots, err := upstreamRoots(cfg.UpstreamCAFile, *upstreamCA)
	if err != nil {
		return err
	}
	leaves, err := loadLeafCache(cfg)
	if err != nil {
		return err
	}
	srv, err := proxy.New(proxy.Options{
		Policy:        policyFrom(cfg, addrs),
		Resolver:      newResolver(cfg.DNSServers),
		UpstreamRoots: roots,
		Logger:        logger,
		Leaves:        leaves,
	})
	if err != nil {
		return err
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info().Str("proxy", ln.Addr().String()).Str("config", cfg.File).
		Int("allowlist_entries", len(cfg.Allowlist.Entries())).Str("version", gatewayVersion()).
		Msg("gateway listening")

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	logger.Info().Dur("grace", shutdownGrace).Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	logger.Info().Msg("stopped")
	return nil
}

// policyFrom assembles the proxy's policy from a loaded config.
func policyFrom(cfg *config.Config, addrs *allowlist.AddrPolicy) *proxy.Policy {
	entries := make([]proxy.EntryRules, len(cfg.Entries))
	for i, e := range cfg.Entries {
		entries[i] = proxy.EntryRules{Transform: e.Transform, AllowPlaintext: e.AllowPlaintext}
	}
	return &proxy.Policy{Allowlist: cfg.Allowlist, Addrs: addrs, Entries: entries}
}

// loadLeafCache loads the gateway's CA when the config names one; nil when
// it does not (the config loader already refused transforms without a CA).
func loadLeafCache(cfg *config.Config) (*ca.LeafCache, error) {
	if cfg.CACertFile == "" {
		return nil, nil
	}
	authority, err := ca.Load(cfg.CACertFile, cfg.CAKeyFile)
	if err != nil {
		return nil, fmt.Errorf("ca: %w (make one with `gateway ca init`)", err)
	}
	return ca.NewLeafCache(authority, 0), nil
}

// loadConfig reads the file, or the built-in default when file is empty.
func loadConfig(file string) (*config.Config, error) {
	if file == "" {
		return config.Parse(configs.DefaultGatewayName, configs.DefaultGateway(), config.Options{})
	}
	return config.Load(file, config.Options{})
}

func parseExemptions(list []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, s := range list {
		ap, err := netip.ParseAddrPort(s)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("%w: --test-allow-upstream %q: want IP:PORT, e.g. 127.0.0.1:8443", errUsage, s)
		}
		out = append(out, ap)
	}
	return out, nil
}

// ownAddresses are the gateway's own addresses, never to be dialled: the
// listener's, and every interface address of this host (a proxy that can
// reach itself can be made to reach its own admin port).
func ownAddresses(listen net.Addr) []netip.Addr {
	var own []netip.Addr
	if ap, err := netip.ParseAddrPort(listen.String()); err == nil && !ap.Addr().IsUnspecified() {
		own = append(own, ap.Addr().Unmap())
	}
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return own
	}
	for _, a := range ifAddrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			own = append(own, pfx.Addr().Unmap())
		}
	}
	return own
}

// upstreamRoots is the system pool plus the PEM files given.
func upstreamRoots(files ...string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("upstream CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream CA %s: no PEM certificate found", f)
		}
	}
	return pool, nil
}

// newResolver returns the system resolver, or one that asks only the
// configured servers.
func newResolver(servers []netip.AddrPort) proxy.Resolver {
	if len(servers) == 0 {
		return net.DefaultResolver
	}
	var d net.Dialer
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var lastErr error
			for _, s := range servers {
				c, err := d.DialContext(ctx, network, s.String())
				if err == nil {
					return c, nil
				}
				lastErr = err
			}
			return nil, lastErr
		},
	}
}
