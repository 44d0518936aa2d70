package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/configs"
	"github.com/hookgate/hookgate/internal/resolve"
)

func runServe(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "Run the egress gateway. Without --config it serves the built-in\ndefault (configs/gateway.yaml): the public internet only.\nSIGHUP reloads the config; SIGTERM/SIGINT shut down gracefully.", stdout)
	var o gatewayOptions
	fs.StringVar(&o.configFile, "config", "", "gateway config `file` (YAML or JSON); default: the built-in configs/gateway.yaml")
	fs.StringVar(&o.listenProxy, "listen", "", "explicit proxy listen `address`, overriding listen.proxy")
	fs.StringVar(&o.listenAdmin, "admin", "", "admin API listen `address`, overriding listen.admin")
	fs.StringVar(&o.upstreamCA, "upstream-ca", "", "extra root certificates `file` (PEM) for upstream TLS, on top of upstream.ca_file")
	redirect := fs.Bool("redirect", false, "shared-namespace mode: install nftables rules in this network namespace that send all other\nprocesses' TCP to listen.transparent and their DNS to listen.dns (needs root); removed on exit")
	keepRules := fs.Bool("keep-rules", false, "with --redirect: leave the redirect rules in place when the gateway exits, so that the other\nprocesses of the namespace have no way out until it is back (a sidecar: fail closed)")
	watch := fs.Bool("watch", false, "reload when the config file or a file it references (${file:} secrets) changes, as SIGHUP does;\nfollows the ..data symlink swap of Kubernetes ConfigMap and Secret volumes")
	var testAllow stringList
	fs.Var(&testAllow, "test-allow-upstream", "FOR TESTS ONLY: exempt exactly this `IP:PORT` from the address policy (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", errUsage, fs.Args())
	}
	for flag, addr := range map[string]string{"--listen": o.listenProxy, "--admin": o.listenAdmin} {
		if addr == "" {
			continue
		}
		if err := config.ValidateListen(addr); err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, flag, err)
		}
	}
	var err error
	if o.exempt, err = parseExemptions(testAllow); err != nil {
		return err
	}
	cfg, err := loadGatewayConfig(o)
	if err != nil {
		return err
	}
	o.sinkhole = sinkholeAddrs(true)
	logger := newLogger(stderr, cfg.LogLevel)
	limits, err := sizeGoRuntime(memlimit.FromCgroup)
	if err != nil {
		logger.Warn().Err(err).Msg("reading the cgroup memory limit; the Go runtime keeps no memory limit (set GOMEMLIMIT to give one)")
	}
	if cfg.DNSDenied == config.DNSDeniedSinkhole && cfg.TransparentListen == "" {
		logger.Warn().Msg("network.dns.denied is sinkhole but listen.transparent is off: denied names resolve to an address that leads nowhere")
	}
	for _, w := range cfg.Warnings {
		logger.Warn().Str("problem", w.Error()).Msg("config")
	}
	for _, ap := range o.exempt {
		logger.Warn().Str("upstream", ap.String()).
			Msg("TEST MODE: --test-allow-upstream exempts this address from the address policy; never use it in production")
	}
	if *keepRules && !*redirect {
		return fmt.Errorf("%w: --keep-rules needs --redirect", errUsage)
	}
	if *watch && o.configFile == "" {
		return fmt.Errorf("%w: --watch needs --config (the built-in config never changes)", errUsage)
	}
	if *redirect {
		if cfg.TransparentListen == "" || cfg.DNSListen == "" {
			return fmt.Errorf("%w: --redirect needs listen.transparent and listen.dns in the config", errUsage)
		}
		o.dialControl = markSocket
	}
	// Before anything serves: a SIGHUP must never hit the default action
	// (terminate) once the gateway is up.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	ls, err := openListeners(cfg, *redirect)
	if err != nil {
		return err
	}
	defer ls.close()
	if cfg.ProxyTLS != nil && ls.proxy != nil {
		if ls.proxy, err = proxyTLSListener(ls.proxy, cfg.ProxyTLS); err != nil {
			return err
		}
	}
	g, err := newGateway(o, cfg, ls.addrs(), logger)
	if err != nil {
		return err
	}
	if *redirect {
		remove, err := installRedirect(ls)
		if err != nil {
			return err
		}
		defer func() {
			if *keepRules {
				logger.Info().Msg("leaving the redirect rules in place (--keep-rules): the namespace has no way out until the gateway is back")
				return
			}
			if err := remove(); err != nil {
				logger.Error().Err(err).Msg("removing the redirect rules")
			}
		}()
	}

	serveErr := make(chan error, 8)
	if ls.proxy != nil {
		go func() { serveErr <- ignoreClosed(g.proxy.Serve(ls.proxy)) }()
	}
	if ls.transparent != nil {
		go func() { serveErr <- ignoreClosed(g.proxy.ServeTransparent(ls.transparent)) }()
	}
	for _, pc := range ls.dnsUDP {
		go func() { serveErr <- ignoreClosed(g.dns.ServeUDP(pc)) }()
	}
	if ls.dnsTCP != nil {
		go func() { serveErr <- ignoreClosed(g.dns.ServeTCP(ls.dnsTCP)) }()
	}
	var adminSrv *http.Server
	if ls.admin != nil {
		g.admin, g.adminToken = ls.admin.Addr(), g.token != ""
		adminSrv = serveAdmin(g.adminHandler(g.token, cfg.AdminPprof), ls.admin, logger)
	}
	if *watch {
		reload := func(ctx context.Context) error { _, err := g.reload(ctx); return err }
		stop, err := startWatch(o.configFile, defaultWatchDebounce, reload, logger)
		if err != nil {
			return fmt.Errorf("--watch: %w", err)
		}
		defer stop()
	}
	g.ready.Store(true)
	g.warnOpenAdmin() // before "gateway listening", which tools wait for
	limits.logFields(logger.Info().Str("proxy", addrOf(ls.proxy)).Str("transparent", addrOf(ls.transparent)).
		Str("dns", addrOf(ls.dnsTCP)).Str("admin", addrOf(ls.admin)).Bool("redirect", *redirect).
		Str("config", cfg.File).Int("allowlist_entries", len(cfg.Allowlist.Entries())).Str("version", gatewayVersion())).
		Msg("gateway listening")

	var failed error
	for running := true; running; {
		select {
		case err := <-serveErr:
			if err != nil {
				logger.Error().Err(err).Msg("a listener failed; shutting down")
				failed, running = err, false
			}
		case <-hup:
			_, _ = g.reload(ctx)
		case <-ctx.Done():
			running = false
		}
	}

	grace := g.cfg.Load().ShutdownGrace
	logger.Info().Float64("grace_ms", durationMS(grace)).Msg("shutting down: no new connections; in-flight requests and tunnels may finish")
	g.ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// The admin API shuts down beside the proxy, not before it: a CPU
	// profile or a reload in flight must not use up the grace of the
	// proxy's requests and tunnels (nor keep its listener open meanwhile).
	adminDone := make(chan struct{})
	go func() {
		defer close(adminDone)
		if adminSrv != nil && adminSrv.Shutdown(sctx) != nil {
			_ = adminSrv.Close() // what still runs after the grace is cut
		}
	}()
	_ = g.dns.Shutdown(sctx)
	err = g.proxy.Shutdown(sctx)
	<-adminDone
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if failed != nil {
		return fmt.Errorf("serving: %w", failed)
	}
	logger.Info().Msg("stopped")
	return nil
}

// timeFormat is the time of every log line: RFC 3339 in UTC with
// milliseconds, always three digits, so lines sort and line up.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// newLogger is the gateway's JSON logger: every line has its "time" with
// millisecond resolution. (A hook rather than zerolog's Timestamp, whose
// format is a package-wide setting.)
func newLogger(w io.Writer, level zerolog.Level) zerolog.Logger {
	return zerolog.New(w).Level(level).Hook(zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
		e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format(timeFormat))
	}))
}

// durationMS is how every duration is logged: milliseconds, as a number
// with microsecond precision, in a field whose name ends in _ms.
func durationMS(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

func ignoreClosed(err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// listeners are the sockets of one gateway, opened before anything else so
// that a busy port fails the start at once.
type listeners struct {
	proxy, transparent, admin, dnsTCP net.Listener
	dnsUDP                            []net.PacketConn
}

// openListeners opens the configured listeners. With redirect, DNS over UDP
// listens on loopback once per family: redirected queries arrive there, and
// an answer must leave from the address the query was redirected to, or
// conntrack cannot translate it back (a wildcard socket answers from another
// address).
func openListeners(cfg *config.Config, redirect bool) (*listeners, error) {
	ls := &listeners{}
	open := func(field, addr string, dst *net.Listener) error {
		if addr == "" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		*dst = ln
		return nil
	}
	for _, l := range []struct {
		field, addr string
		dst         *net.Listener
	}{
		{"listen.proxy", cfg.ProxyListen, &ls.proxy},
		{"listen.transparent", cfg.TransparentListen, &ls.transparent},
		{"listen.admin", cfg.AdminListen, &ls.admin},
		{"listen.dns", cfg.DNSListen, &ls.dnsTCP},
	} {
		if err := open(l.field, l.addr, l.dst); err != nil {
			ls.close()
			return nil, err
		}
	}
	if ls.dnsTCP != nil {
		// UDP on the same port as the TCP listener (which may have been :0).
		udpAddrs := []string{ls.dnsTCP.Addr().String()}
		if redirect {
			port := strconv.Itoa(int(portOf(ls.dnsTCP.Addr())))
			udpAddrs = []string{"127.0.0.1:" + port, "[::1]:" + port}
		}
		for i, addr := range udpAddrs {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				if i > 0 { // no IPv6 loopback on this host: IPv4 only
					break
				}
				ls.close()
				return nil, fmt.Errorf("listen.dns: %w", err)
			}
			ls.dnsUDP = append(ls.dnsUDP, pc)
		}
	}
	return ls, nil
}

// addrs are the listening addresses, which the gateway must never dial.
func (ls *listeners) addrs() []netip.Addr {
	var own []netip.Addr
	for _, ln := range []net.Listener{ls.proxy, ls.transparent, ls.admin, ls.dnsTCP} {
		if ln == nil {
			continue
		}
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && !ap.Addr().IsUnspecified() {
			own = append(own, ap.Addr().Unmap())
		}
	}
	return own
}

func (ls *listeners) close() {
	for _, c := range []io.Closer{ls.proxy, ls.transparent, ls.admin, ls.dnsTCP} {
		if c != nil {
			_ = c.Close()
		}
	}
	for _, pc := range ls.dnsUDP {
		_ = pc.Close()
	}
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

// interfaceAddresses are every address of this host's interfaces: a proxy
// that can reach itself can be made to reach its own admin port.
func interfaceAddresses() []netip.Addr {
	var own []netip.Addr
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range ifAddrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			own = append(own, pfx.Addr().Unmap())
		}
	}
	return own
}

// newResolver returns the system resolver, or one that asks only the
// configured servers. control, if set, is applied to its sockets (SO_MARK in
// shared-namespace mode, where unmarked DNS would be redirected back to the
// gateway's own DNS server); then it never uses the system's cgo resolver,
// whose sockets it could not mark.
func newResolver(servers []netip.AddrPort, control func(network, address string, c syscall.RawConn) error) resolve.Resolver {
	d := net.Dialer{Control: control}
	if len(servers) == 0 {
		if control == nil {
			return net.DefaultResolver
		}
		return &net.Resolver{PreferGo: true, Dial: d.DialContext}
	}
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
