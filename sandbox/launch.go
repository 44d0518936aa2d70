// Package sandbox is the sandbox of `gateway sandbox exec`: it runs a
// command confined in a network namespace (built by sandbox/netns) whose
// only way out is the gateway, in PID and mount namespaces of its own, as
// an unprivileged user without capabilities.
//
// The launcher (Command) starts the command's init, this binary re-executed
// (see init.go), which drops privileges and starts the command; it forwards
// the signals the gateway gets and turns the command's end into a shell
// exit status. CommandEnv prepares the command's environment: no proxy
// settings, none of the variables the gateway's secrets come from, and a
// CA bundle (WriteCABundle) that trusts the gateway's CA. ParseUser and
// DefaultUser choose who the command runs as.
//
//	ns, err := netns.New() // then the gateway's listeners and rules in it
//	c := &sandbox.Command{Path: path, Args: argv, Dir: dir, User: u, Env: env, Grace: 10 * time.Second}
//	if err := c.Start(ns); err != nil { ... }
//	status := c.Wait(ctx)
//
// A binary that launches sandboxes must hand its init over first thing in
// main:
//
//	if sandbox.IsInit(os.Args[1:]) {
//		os.Exit(sandbox.RunInit(os.Args[1:], os.Stderr))
//	}
package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/hookgate/hookgate/sandbox/netns"
)

// Command is a command to run in a sandbox. Set its fields, then Start it
// and Wait for it; a Command runs once.
type Command struct {
	Path string   // the program, as exec.LookPath found it
	Args []string // its argv, Args[0] included
	Dir  string   // its working directory; User must be able to enter it
	User User
	// Env is its environment (see CommandEnv); HOME, USER and LOGNAME are
	// set to User's when the user database knows the user.
	Env    []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Grace is how long Wait lets the command run after forwarding it a
	// signal (or after its context ends) before it kills the sandbox.
	Grace  time.Duration
	Logger zerolog.Logger

	cmd     *exec.Cmd
	started chan struct{} // closed when the init has started the command, or ended
	tty     int           // Stdin's fd when it is a terminal, else -1
}

// Start starts the command's init in ns's network namespace and in new PID
// and mount namespaces; the init starts the command. The init (and with it
// everything in the sandbox) is killed when the calling process dies.
func (c *Command) Start(ns *netns.Sandbox) error {
	if c.cmd != nil {
		return errors.New("sandbox: Command already started")
	}
	if len(c.Args) == 0 {
		return errors.New("sandbox: Command without Args")
	}
	cmd := exec.Command("/proc/self/exe", initArgs(c.User, c.Dir, c.Path, c.Args)...)
	cmd.Args[0] = "gateway"
	cmd.Env = userEnv(c.Env, c.User)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	// The command dies with us, even by SIGKILL: without the gateway it has
	// no way out anyway. (Its init is PID 1 of its namespace: when the init
	// dies, the kernel kills the rest.)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
	}
	c.tty = foregroundTTY(c.Stdin)
	if c.tty >= 0 {
		// Interactive: the init's process group takes the terminal, and
		// hands it on to the command's, so that the command can read it
		// and gets ^C itself.
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = 0
	}
	// The init says on initStartedFD when the command runs.
	startedR, startedW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.ExtraFiles = []*os.File{startedW}
	err = ns.Start(cmd)
	_ = startedW.Close()
	if err != nil {
		_ = startedR.Close()
		return err
	}
	c.cmd = cmd
	c.started = make(chan struct{})
	go func() {
		defer close(c.started)
		defer startedR.Close()
		_, _ = startedR.Read(make([]byte, 1)) // a byte, or EOF when the init exits
	}()
	return nil
}

// Pid is the process id of the command's init (in our PID namespace), once
// Start has succeeded.
func (c *Command) Pid() int { return c.cmd.Process.Pid }

// Wait waits for the command to end, forwarding SIGINT, SIGTERM and SIGHUP
// to it, and returns its exit status as a shell reports it (128+N when it
// died of signal N). When ctx ends, the command gets SIGTERM (or the
// signal that ended ctx). Grace after the first signal, the init is killed,
// and with it everything in the sandbox. When the command had the terminal,
// Wait takes it back.
func (c *Command) Wait(ctx context.Context) int {
	if c.tty >= 0 {
		defer reclaimTTY(c.tty)
	}
	// When the init is gone, so is its PID namespace: nothing the command
	// started is left.
	return shellStatus(c.waitForwarding(ctx))
}

// waitForwarding waits for the init, forwarding SIGINT, SIGTERM and SIGHUP
// to it (it passes them on to the command); Grace after the first one (or
// after ctx ends), it kills the init. Signals are held back until the init
// has started the command: before it has set up its handlers, a signal
// would end the init (Go's default) instead of reaching the command.
func (c *Command) waitForwarding(ctx context.Context) *os.ProcessState {
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	done := make(chan struct{})
	go func() {
		_ = c.cmd.Wait()
		close(done)
	}()
	pid := c.cmd.Process.Pid
	started := c.started
	var kill <-chan time.Time
	ctxDone := ctx.Done()
	var held []syscall.Signal
	forward := func(sig syscall.Signal) {
		if kill == nil {
			kill = time.After(c.Grace)
		}
		if started != nil {
			held = append(held, sig)
			return
		}
		c.Logger.Info().Str("signal", sig.String()).Int("pid", pid).
			Float64("grace_ms", float64(c.Grace.Microseconds())/1000).Msg("forwarding signal to the sandbox")
		_ = syscall.Kill(pid, sig)
	}
	for {
		select {
		case <-done:
			return c.cmd.ProcessState
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
				return c.cmd.ProcessState
			case <-time.After(100 * time.Millisecond):
				forward(syscall.SIGTERM)
			}
		case <-kill:
			c.Logger.Warn().Int("pid", pid).Msg("the sandbox did not stop within the grace period: SIGKILL")
			_ = syscall.Kill(pid, syscall.SIGKILL)
			kill = nil
		}
	}
}

// shellStatus is the shell's view of how a process ended.
func shellStatus(st *os.ProcessState) int {
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
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
