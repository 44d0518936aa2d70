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
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/dnsserver"
	"github.com/hookgate/hookgate/proxy"
	"github.com/hookgate/hookgate/sandbox/netns"
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
	case sandboxInitArg:
		return runSandboxInit(args[1:])
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
	who, err := resolveSandboxUser(*userFlag, os.Getenv)
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
	if who.uid == 0 {
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

	sb, err := startSandbox(gatewayOptions{configFile: *configFile, upstreamCA: *upstreamCA, exempt: exempt}, cfg, logger)
	if err != nil {
		return sandboxError(err)
	}
	defer sb.close()

	// The command's init (see sandbox_init.go): this binary again, in new
	// PID and mount namespaces, which drops privileges and starts CMD.
	cmd := exec.Command("/proc/self/exe", sandboxInitArgs(who, dir, path, argv)...)
	cmd.Args[0] = "gateway"
	cmd.Env = userEnv(sandboxEnv(os.Environ(), cfg, sb.bundle), who)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// The command dies with us, even by SIGKILL: without the gateway it has
	// no way out anyway. (Its init is PID 1 of its namespace: when the init
	// dies, the kernel kills the rest.)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
	}
	tty := foregroundTTY(stdin)
	if tty >= 0 {
		// Interactive: the init's process group takes the terminal, and
		// hands it on to the command's, so that the command can read it
		// and gets ^C itself.
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = 0
	}
	// The init says on fd 3 when the command runs (see initStarted).
	startedR, startedW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox exec: %w", err)
	}
	cmd.ExtraFiles = []*os.File{startedW}
	err = sb.ns.Start(cmd)
	_ = startedW.Close()
	if err != nil {
		_ = startedR.Close()
		return &exitError{code: 127, msg: fmt.Sprintf("sandbox exec: starting %s: %v", argv[0], err)}
	}
	started := make(chan struct{})
	go func() {
		defer close(started)
		defer startedR.Close()
		_, _ = startedR.Read(make([]byte, 1)) // a byte, or EOF when the init exits
	}()
	if tty >= 0 {
		defer reclaimTTY(tty)
	}
	logger.Info().Int("pid", cmd.Process.Pid).Str("command", argv[0]).
		Str("user", who.String()).Str("user_from", who.source).
		Uint64("netns_inode", sb.nsInode).
		Str("transparent", sb.tcpLn.Addr().String()).Int("dns_port", sandboxDNSPort).
		Str("config", cfg.File).Str("version", gatewayVersion()).
		Msg("sandbox ready")

	state := waitForwarding(ctx, cmd, started, *grace, logger)
	// The init is gone, and with it its PID namespace: nothing the command
	// started is left. (Killing the init's group is a no-op kept for
	// safety.)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	code := exitStatus(state)
	logger.Info().Int("pid", cmd.Process.Pid).Int("status", code).Msg("sandbox command ended")
	if err := sb.stop(); err != nil {
		logger.Warn().Err(err).Msg("stopping the sandbox's servers")
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// waitForwarding waits for cmd (the sandbox's init), forwarding SIGINT,
// SIGTERM and SIGHUP to it (it passes them on to the command); grace after
// the first one (or after ctx ends), it kills the init, and with it the
// whole sandbox. Signals are held back until started is closed: before
// it has set up its handlers, a signal would end the init (Go's default)
// instead of reaching the command.
func waitForwarding(ctx context.Context, cmd *exec.Cmd, started <-chan struct{}, grace time.Duration, logger zerolog.Logger) *os.ProcessState {
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	pid := cmd.Process.Pid
	var kill <-chan time.Time
	ctxDone := ctx.Done()
	var held []syscall.Signal
	forward := func(sig syscall.Signal) {
		if kill == nil {
			kill = time.After(grace)
		}
		if started != nil {
			held = append(held, sig)
			return
		}
		logger.Info().Str("signal", sig.String()).Int("pid", pid).Float64("grace_ms", durationMS(grace)).Msg("forwarding signal to the sandbox")
		_ = syscall.Kill(pid, sig)
	}
	for {
		select {
		case <-done:
			return cmd.ProcessState
		case <-started:
			started = nil
			for _, sig := range held {
				forward(sig)
			}
			held = nil
		case s := <-sigc:
			forward(s.(syscall.Signal))
		case <-ctxDone:
			// The signal that ended ctx (main's SIGINT/SIGTERM) also comes
			// on sigc, maybe a moment later: forward that one, so that the
			// command dies of the signal the user sent.
			ctxDone = nil
			if kill != nil {
				continue
			}
			select {
			case s := <-sigc:
				forward(s.(syscall.Signal))
			case <-done:
				return cmd.ProcessState
			case <-time.After(100 * time.Millisecond):
				forward(syscall.SIGTERM)
			}
		case <-kill:
			logger.Warn().Int("pid", pid).Msg("the sandbox did not stop within the grace period: SIGKILL")
			_ = syscall.Kill(pid, syscall.SIGKILL)
			kill = nil
		}
	}
}

// exitStatus is the shell's view of how a process ended.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
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
	bundle  string // temporary CA bundle file; "" when there is no CA

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
	if cfg.CACertFile != "" {
		if r.bundle, err = writeCABundle(cfg.CACertFile); err != nil {
			return nil, err
		}
	}
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
// the namespace reference, the CA bundle. Safe to call more than once.
func (r *runningSandbox) close() {
	_ = r.stop()
	for _, c := range r.closers {
		_ = c.Close()
	}
	r.closers = nil
	if r.ns != nil {
		_ = r.ns.Close()
	}
	if r.bundle != "" {
		_ = os.Remove(r.bundle)
		r.bundle = ""
	}
}

// systemBundles are the usual places of the system's PEM bundle: Debian,
// Ubuntu, Alpine; RHEL, Fedora; openSUSE; others.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// writeCABundle writes the system roots (the file SSL_CERT_FILE names, or
// the first of systemBundles that exists) followed by our CA to a new
// temporary file, world-readable (the command may drop privileges), and
// returns its path.
func writeCABundle(caFile string) (string, error) {
	ours, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("ca.cert_file: %w", err)
	}
	var system []byte
	candidates := systemBundles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		candidates = append([]string{f}, candidates...)
	}
	for _, f := range candidates {
		if b, err := os.ReadFile(f); err == nil {
			system = b
			break
		}
	}
	removeStaleBundles()
	f, err := os.CreateTemp("", bundlePrefix+strconv.Itoa(os.Getpid())+"-*.pem")
	if err != nil {
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	name := f.Name()
	if len(system) > 0 && system[len(system)-1] != '\n' {
		system = append(system, '\n')
	}
	_, werr := f.Write(append(system, ours...))
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(name, 0o644)); err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	return name, nil
}

// bundlePrefix starts the name of a CA bundle; the pid of the gateway that
// wrote it follows, so that the next run can remove the bundle of a gateway
// that was killed.
const bundlePrefix = "hookgate-sandbox-ca-"

// removeStaleBundles removes the CA bundles of gateways that are gone.
func removeStaleBundles() {
	paths, _ := filepath.Glob(filepath.Join(os.TempDir(), bundlePrefix+"*-*.pem"))
	for _, p := range paths {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(p), bundlePrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.Remove(p)
		}
	}
}

// caEnv are the variables that point common tools at a CA bundle.
var caEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// proxyEnv are removed, in any case: the sandbox needs no proxy, and one
// pointing anywhere would only fail.
var proxyEnv = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY"}

var envRef = regexp.MustCompile(`\$\{env:([^}]*)\}`)

// sandboxEnv is the command's environment: ours, without proxy settings,
// without the variables the config's transforms read secrets from (nor any
// variable holding a secret's value: the sandbox must never have them),
// with the CA bundle variables when there is a bundle.
func sandboxEnv(environ []string, cfg *config.Config, bundle string) []string {
	drop := map[string]bool{}
	for _, k := range proxyEnv {
		drop[k] = true
	}
	if bundle != "" {
		for _, k := range caEnv {
			drop[k] = true
		}
	}
	var secrets []string
	for _, e := range cfg.Entries {
		for _, v := range e.Transform.References() {
			for _, m := range envRef.FindAllStringSubmatch(v, -1) {
				drop[strings.ToUpper(m[1])] = true
			}
		}
		for _, s := range e.Transform.Secrets() {
			if v := s.Reveal(); v != "" {
				secrets = append(secrets, v)
			}
		}
	}
	out := make([]string, 0, len(environ)+len(caEnv))
next:
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if drop[strings.ToUpper(k)] {
			continue
		}
		for _, s := range secrets {
			if strings.Contains(v, s) {
				continue next
			}
		}
		out = append(out, kv)
	}
	if bundle != "" {
		for _, k := range caEnv {
			out = append(out, k+"="+bundle)
		}
	}
	return out
}

// foregroundTTY returns stdin's fd when it is a terminal, else -1.
func foregroundTTY(stdin io.Reader) int {
	f, ok := stdin.(*os.File)
	if !ok {
		return -1
	}
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return -1
	}
	return fd
}

// reclaimTTY makes our process group the terminal's foreground again after
// the command (which had it) ended. A background process gets SIGTTOU for
// that unless it ignores it.
func reclaimTTY(fd int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp())
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
