// Command gateway is hookgate's single binary: the egress gateway (serve,
// check, ca), the hook runtime (hooks) and version information.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookgate/hookgate/sandbox"
)

func main() {
	// sandbox exec re-executes this binary as the sandbox's init.
	if sandbox.IsInit(os.Args[1:]) {
		os.Exit(sandbox.RunInit(os.Args[1:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitError carries a specific exit status (2 for a hook deny, for example)
// without printing anything more than its message.
type exitError struct {
	code int
	msg  string // printed to stderr when non-empty
}

func (e *exitError) Error() string { return e.msg }

// errUsage marks errors that are the caller's fault: printed with a hint
// and mapped to exit status 2.
var errUsage = errors.New("usage")

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "gateway:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "gateway:", err)
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// command is one subcommand: its one-line summary and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":     {"run the egress gateway", runServe},
		"check":     {"validate a gateway config file", runCheck},
		"version":   {"print the version", runVersion},
		"ca":        {"create the gateway's CA, print its certificate", runCA},
		"hooks":     {"run and check tool-execution hooks (hooks.json)", runHooks},
		"policy":    {"check, test and serve a declarative tool policy (policy.yaml)", runPolicy},
		"allowlist": {"suggest an allowlist from decision lines (report mode rollout)", runAllowlist},
		"sandbox":   {"run a command in a network namespace whose only way out is the gateway", runSandbox},
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout, cmds)
		if len(args) == 0 {
			return fmt.Errorf("%w: no command given", errUsage)
		}
		return nil
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		printUsage(stderr, cmds)
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	return cmd.run(ctx, args[1:], stdin, stdout, stderr)
}
