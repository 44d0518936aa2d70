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
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/dnsserver"
	"github.com/hookgate/hookgate/proxy"
	"github.com/hookgate/hookgate/sandbox"
	"github.com/hookgate/hookgate/sandbox/netns"
	"github.com/hookgate/hookgate/transform"
)

// The listener ports inside the sandbox namespace. The namespace is new and
// empty, so they are always free; its processes start after we listen.
const (
	sandboxTCPPort = 15001
	sandboxDNSPort = 15053
)

// Defaults of sandbox exec.
const (
	sandboxGrace    = 10 * time.Second // from forwarding SIGTERM to SIGKILL
	sandboxStopWait = 5 * time.Second  // servers draining after the command ended
)

// sandboxUsage is the help of `gateway sandbox` and `gateway sandbox exec`
// (which adds its flags).
const sandboxUsage = `usage: gateway sandbox exec [flags] -- CMD [ARGS...]

Run CMD in a new network namespace whose only way out is the gateway: all its
TCP (IPv4 and IPv6) goes to the gateway's transparent listener, DNS to the
gateway's DNS server, and everything else is dropped; TCP to the sandbox's own
loopback stays local. CMD needs no proxy settings; it gets a CA bundle that
trusts the gateway's CA. Its exit status becomes the gateway's (128+N when it
dies of signal N).

CMD runs in its own PID and mount namespace (a /proc of its own), as an
unprivileged user (--user; default: the user behind sudo, else nobody), with
no capabilities and no_new_privs: it cannot change the rules, leave the
namespace or regain privileges. The user must be able to enter the workspace.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
`

func runSandbox(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, sandboxUsage)
		return fmt.Errorf("%w: sandbox: no subcommand given (want exec)", errUsage)
	}
	switch args[0] {
	case "exec":
		return runSandboxExec(ctx, args[1:], stdin, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, sandboxUsage)
		return nil
	default:
		fmt.Fprint(stderr, sandboxUsage)
		return fmt.Errorf("%w: sandbox: unknown subcommand %q (want exec)", errUsage, args[0])
	}
}

func runSandboxExec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("sandbox exec", "", stdout)
	fs.Usage = func() {
		fmt.Fprint(stdout, sandboxUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	configFile := fs.String("config", "", "gateway config `file` (YAML or JSON); default: the built-in configs/gateway.yaml")
	workspace := fs.String("workspace", "", "working `directory` of the command; default: the current one")
	upstreamCA := fs.String("upstream-ca", "", "extra root certificates `file` (PEM) for upstream TLS, on top of upstream.ca_file")
	logFile := fs.String("log", "", "write the gateway's log to this `file` instead of stderr")
	grace := fs.Duration("grace", sandboxGrace, "after forwarding SIGINT/SIGTERM to the command, how long to wait before SIGKILL")
	userFlag := fs.String("user", "", "run the command as `UID[:GID]` (numbers or names); default: SUDO_UID:SUDO_GID, else nobody. 0 (root) only when given here, and still without capabilities")
	var testAllow stringList
	fs.Var(&testAllow, "test-allow-upstream", "FOR TESTS ONLY: exempt exactly this `IP:PORT` from the address policy (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return fmt.Errorf("%w: sandbox exec: no command given (gateway sandbox exec -- CMD ARGS)", errUsage)
	}
	dir, err := sandboxDir(*workspace)
	if err != nil {
		return err
	}
	who, err := sandboxUser(*userFlag, os.Getenv)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*configFile)
	if err != nil {
		return err
	}
	exempt, err := parseExemptions(testAllow)
	if err != nil {
		return err
	}
	// The log and the command's stderr share stderr; exec copies into a
	// writer that is not a file from a goroutine of its own, so serialise.
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr}
	}
	logOut := stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		defer f.Close()
		logOut = f
	}
	logger := newLogger(logOut, cfg.LogLevel)
	if who.UID == 0 {
		logger.Warn().Str("user", who.String()).
			Msg("--user 0: the command runs as ROOT inside the sandbox (without capabilities, but owning every root-owned file it can reach); prefer an unprivileged user")
	}
	for _, ap := range exempt {
		logger.Warn().Str("upstream", ap.String()).
			Msg("TEST MODE: --test-allow-upstream exempts this address from the address policy; never use it in production")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return &exitError{code: 127, msg: fmt.Sprintf("sandbox exec: %v", err)}
	}

	c := &sandbox.Command{
		Path: path, Args: argv, Dir: dir, User: who,
		Stdin: stdin, Stdout: stdout, Stderr: stderr,
		Grace: *grace, Logger: logger,
	}
	return runInSandbox(ctx, c, gatewayOptions{configFile: *configFile, upstreamCA: *upstreamCA, exempt: exempt}, cfg)
}

// runInSandbox starts the gateway in a new sandbox namespace, runs c there
// with its environment made from ours, and stops the gateway when c ends.
// An exit status other than 0 is an *exitError.
func runInSandbox(ctx context.Context, c *sandbox.Command, o gatewayOptions, cfg *config.Config) error {
	sb, err := startSandbox(o, cfg, c.Logger)
	if err != nil {
		return sandboxError(err)
	}
	defer sb.close()
	var bundle string
	if cfg.CACertFile != "" {
		if bundle, err = sandbox.WriteCABundle(cfg.CACertFile); err != nil {
			return fmt.Errorf("sandbox exec: %w", err)
		}
		defer os.Remove(bundle)
	}
	c.Env = sandbox.CommandEnv(os.Environ(), configTransforms(cfg), bundle)
	if err := c.Start(sb.ns); err != nil {
		return &exitError{code: 127, msg: fmt.Sprintf("sandbox exec: starting %s: %v", c.Args[0], err)}
	}
	c.Logger.Info().Int("pid", c.Pid()).Str("command", c.Args[0]).
		Str("user", c.User.String()).Str("user_from", c.User.Source).
		Uint64("netns_inode", sb.nsInode).
		Str("transparent", sb.tcpLn.Addr().String()).Int("dns_port", sandboxDNSPort).
		Str("config", cfg.File).Str("version", gatewayVersion()).
		Msg("sandbox ready")

	code := c.Wait(ctx)
	c.Logger.Info().Int("pid", c.Pid()).Int("status", code).Msg("sandbox command ended")
	if err := sb.stop(); err != nil {
		c.Logger.Warn().Err(err).Msg("stopping the sandbox's servers")
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// configTransforms are the transforms of the config's entries, and of its
// tenants' entries: the secrets the sandbox must not have.
func configTransforms(cfg *config.Config) []*transform.Rules {
	rules := make([]*transform.Rules, 0, len(cfg.Entries))
	for _, e := range cfg.Entries {
		rules = append(rules, e.Transform)
	}
	for _, t := range cfg.Tenants {
		for _, e := range t.Entries {
			rules = append(rules, e.Transform)
		}
	}
	return rules
}

// sandboxUser chooses the command's user: --user UID[:GID] (a name works
// too), else the user behind sudo, else nobody. Root only when --user says
// so.
func sandboxUser(flag string, getenv func(string) string) (sandbox.User, error) {
	if flag == "" {
		return sandbox.DefaultUser(getenv)
	}
	u, err := sandbox.ParseUser(flag)
	if err != nil {
		return u, fmt.Errorf("%w: --user %q: %v", errUsage, flag, err)
	}
	u.Source = "--user"
	return u, nil
}

// sandboxDir is the command's working directory: the workspace, else ours.
// It is always given to the init, so that the command's user must be able
// to enter it (the change of directory happens after the change of user).
func sandboxDir(workspace string) (string, error) {
	if workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("sandbox exec: the current directory: %w", err)
		}
		return wd, nil
	}
	if st, err := os.Stat(workspace); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w: --workspace %q: not a directory", errUsage, workspace)
	}
	return filepath.Abs(workspace)
}

// sandboxError says plainly, once, what a user lacking privilege must do.
func sandboxError(err error) error {
	var pe *netns.PrivilegeError
	if errors.As(err, &pe) {
		return fmt.Errorf("sandbox exec needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run it with sudo (%s: %w)", pe.Op, pe.Err)
	}
	return fmt.Errorf("sandbox exec: %w", err)
}

// loopbackOnly keeps the loopback addresses of aps.
func loopbackOnly(aps []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ap := range aps {
		if ap.Addr().Unmap().IsLoopback() {
			out = append(out, ap)
		}
	}
	return out
}

// runningSandbox is the namespace and the gateway serving it.
type runningSandbox struct {
	ns      *netns.Sandbox
	nsInode uint64
	tcpLn   net.Listener
	proxy   *proxy.Server
	dns     *dnsserver.Server

	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
	closers  []io.Closer // listeners not yet handed to a server
}

// startSandbox creates the namespace, its listeners and rules, and starts
// the transparent proxy and the DNS server on them.
func startSandbox(o gatewayOptions, cfg *config.Config, logger zerolog.Logger) (_ *runningSandbox, err error) {
	r := &runningSandbox{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.ns, err = netns.New(); err != nil {
		return nil, err
	}
	r.nsInode = r.ns.Inode()
	if r.tcpLn, err = r.ns.Listen("tcp", ":"+strconv.Itoa(sandboxTCPPort)); err != nil {
		return nil, fmt.Errorf("transparent listener in the sandbox: %w", err)
	}
	r.closers = append(r.closers, r.tcpLn)
	// UDP: one socket per family on the redirect's target address, so that
	// answers leave from it and conntrack translates them back.
	dnsAddrs := []struct{ network, addr string }{{"udp4", "127.0.0.1"}}
	if r.ns.IPv6() {
		dnsAddrs = append(dnsAddrs, struct{ network, addr string }{"udp6", "[::1]"})
	}
	var pcs []net.PacketConn
	for _, a := range dnsAddrs {
		pc, err := r.ns.ListenPacket(a.network, a.addr+":"+strconv.Itoa(sandboxDNSPort))
		if err != nil {
			return nil, fmt.Errorf("DNS listener in the sandbox: %w", err)
		}
		pcs = append(pcs, pc)
		r.closers = append(r.closers, pc)
	}
	dnsTCP, err := r.ns.Listen("tcp", ":"+strconv.Itoa(sandboxDNSPort))
	if err != nil {
		return nil, fmt.Errorf("DNS listener in the sandbox: %w", err)
	}
	r.closers = append(r.closers, dnsTCP)

	// The same gateway as serve's: policy, guarded dialer, DNS server,
	// observers. Its upstream dials are made from our own namespace.
	o.sinkhole = sinkholeAddrs(r.ns.IPv6())
	g, err := newGateway(o, cfg, nil, logger)
	if err != nil {
		return nil, err
	}
	r.proxy, r.dns = g.proxy, g.dns
	// The namespace's loopback is the sandbox's own: TCP to it stays there,
	// except to the loopback upstreams a test exempts (--test-allow-upstream),
	// which are the gateway's.
	if err := r.ns.Redirect(netns.Redirect{
		TCPPort: sandboxTCPPort, DNSPort: sandboxDNSPort,
		LocalLoopback: true, KeepRedirecting: loopbackOnly(o.exempt),
	}); err != nil {
		return nil, err
	}

	// From here on the servers own (and close) the listeners.
	r.closers = nil
	r.serve("transparent", func() error { return r.proxy.ServeTransparent(r.tcpLn) }, logger)
	for _, pc := range pcs {
		r.serve("dns-udp", func() error { return r.dns.ServeUDP(pc) }, logger)
	}
	r.serve("dns-tcp", func() error { return r.dns.ServeTCP(dnsTCP) }, logger)
	return r, nil
}

func (r *runningSandbox) serve(name string, f func() error, logger zerolog.Logger) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			logger.Error().Err(err).Str("listener", name).Msg("sandbox listener stopped")
		}
	}()
}

// stop shuts the servers down, bounded by sandboxStopWait.
func (r *runningSandbox) stop() error {
	r.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sandboxStopWait)
		defer cancel()
		var errs []error
		if r.proxy != nil {
			if err := r.proxy.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, err)
			}
		}
		if r.dns != nil {
			if err := r.dns.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, err)
			}
		}
		// The servers close their listeners; this covers a listener whose
		// Serve had not registered it yet when Shutdown ran.
		if r.tcpLn != nil {
			_ = r.tcpLn.Close()
		}
		r.wg.Wait()
		r.stopErr = errors.Join(errs...)
	})
	return r.stopErr
}

// close stops everything and removes what was made: servers, listeners,
// the namespace reference. Safe to call more than once.
func (r *runningSandbox) close() {
	_ = r.stop()
	for _, c := range r.closers {
		_ = c.Close()
	}
	r.closers = nil
	if r.ns != nil {
		_ = r.ns.Close()
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
