package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/sandbox"
)

// maxEventSize bounds the event JSON read from stdin.
const maxEventSize = 16 << 20

const hooksUsage = `usage: gateway hooks run pre_tool_execution|post_tool_execution [flags] < event.json
       gateway hooks check [flags]

run    runs the hooks of .agents/hooks.json and /.agents/hooks.json for one tool
       event read on stdin, prints the decision JSON and exits 0 (allow) or 2 (deny).
check  prints every group, matcher and handler loaded, and the problems found;
       exits 1 when there are errors.
`

func runHooks(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, hooksUsage)
		return fmt.Errorf("%w: hooks: missing subcommand (run or check)", errUsage)
	}
	switch args[0] {
	case "run":
		return notDeny(runHooksRun(ctx, args[1:], stdin, stdout, stderr))
	case "check":
		return runHooksCheck(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, hooksUsage)
		return nil
	}
	fmt.Fprint(stderr, hooksUsage)
	return fmt.Errorf("%w: hooks: unknown subcommand %q", errUsage, args[0])
}

// notDeny keeps exit status 2 for a deny only: `hooks run` reports usage
// errors (bad flag, malformed event) with status 1, so a caller can never
// mistake a broken invocation for a deny.
func notDeny(err error) error {
	if errors.Is(err, errUsage) {
		return &exitError{code: 1, msg: err.Error()}
	}
	return err
}

func runHooksRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("hooks run", "run the hooks for one tool event (event JSON on stdin)", stderr)
	workspace := fs.String("workspace", "", "workspace directory: its .agents/hooks.json is loaded and commands run there (default: current directory)")
	root := fs.String("root", "/", "directory standing for / : ROOT/.agents/hooks.json is the authoritative file")
	envID := fs.String("environment-id", "", "environment_id to add to the event when it has none")
	proxy := fs.String("proxy", "", "proxy URL for HTTP hooks (default: HTTPS_PROXY from the environment, else direct)")
	caFile := fs.String("ca-file", "", "PEM file of extra CAs to trust for HTTP hooks (the gateway's CA)")
	logLevel := fs.String("log-level", "info", "log level of the per-handler lines on stderr: debug, info, warn, error, disabled")
	deadline := fs.Duration("deadline", 0, "overall deadline for all the event's hooks (0: only each handler's timeout)")
	// The event name may come before or after the flags.
	var kindArg string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		kindArg, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if kindArg == "" && fs.NArg() > 0 {
		kindArg = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: hooks run: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if kindArg == "" {
		return fmt.Errorf("%w: hooks run: missing event (pre_tool_execution or post_tool_execution)", errUsage)
	}
	kind, err := sandbox.ParseEventKind(kindArg)
	if err != nil {
		return fmt.Errorf("%w: hooks run: %v", errUsage, err)
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("%w: hooks run: --log-level: %v", errUsage, err)
	}
	log := newLogger(stderr, level)

	data, err := io.ReadAll(io.LimitReader(stdin, maxEventSize+1))
	if err != nil {
		return fmt.Errorf("hooks run: reading the event: %w", err)
	}
	if len(data) > maxEventSize {
		return fmt.Errorf("%w: hooks run: event larger than %d bytes", errUsage, maxEventSize)
	}
	ev, err := sandbox.ParseEvent(kind, data, *envID)
	if err != nil {
		return fmt.Errorf("%w: hooks run: %v", errUsage, err)
	}

	hooks, problems, err := sandbox.Load(sandbox.LoadOptions{Workspace: *workspace, Root: *root})
	if err != nil {
		return err
	}
	for _, p := range problems {
		e := log.Warn()
		if p.Severity == sandbox.SeverityError {
			e = log.Error()
		}
		e.Str("problem", p.String()).Msg("hooks.json")
	}

	client, err := hookhttp.New(hookhttp.Options{Version: gatewayVersion(), Proxy: *proxy, CAFile: *caFile})
	if err != nil {
		return fmt.Errorf("hooks run: %w", err)
	}
	defer client.Close()

	runner := sandbox.NewRunner(hooks, sandbox.RunnerOptions{Logger: log, HTTP: client, Deadline: *deadline})
	d := runner.Run(ctx, ev)
	out, err := json.Marshal(d)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, string(out))
	if d.Denied() {
		return &exitError{code: 2}
	}
	return nil
}

func runHooksCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hooks check", "print the hooks that were loaded and the problems found", stderr)
	workspace := fs.String("workspace", "", "workspace directory (default: current directory)")
	root := fs.String("root", "/", "directory standing for / : ROOT/.agents/hooks.json is the authoritative file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hooks check: unexpected argument %q", errUsage, fs.Arg(0))
	}
	hooks, problems, err := sandbox.Load(sandbox.LoadOptions{Workspace: *workspace, Root: *root})
	if err != nil {
		return err
	}
	printHooks(stdout, hooks)
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "\n%d problem(s):\n", len(problems))
		for _, p := range problems {
			fmt.Fprintln(stdout, "  "+p.String())
		}
	}
	if sandbox.HasErrors(problems) {
		return &exitError{code: 1}
	}
	return nil
}

func printHooks(w io.Writer, h *sandbox.Hooks) {
	if len(h.Files) == 0 {
		fmt.Fprintf(w, "no hooks.json found (looked for %s in the workspace %s and under the root)\n", sandbox.HooksFile, h.Workspace)
		return
	}
	fmt.Fprintln(w, "files (root first):")
	for _, f := range h.Files {
		fmt.Fprintln(w, "  "+f)
	}
	fmt.Fprintf(w, "commands run in: %s\n", h.Workspace)
	for _, g := range h.Groups {
		state := "enabled"
		if !g.Enabled {
			state = "disabled"
		}
		fmt.Fprintf(w, "\ngroup %q (%s)  %s:%d\n", g.Name, state, g.File, g.Line)
		for _, kind := range []sandbox.EventKind{sandbox.PreToolExecution, sandbox.PostToolExecution} {
			for _, r := range g.Rules[kind] {
				m := fmt.Sprintf("%q", r.Matcher.Pattern())
				switch {
				case r.Matcher.Err() != nil:
					m += " (INVALID: matches nothing)"
				case r.Matcher.MatchesAll():
					m += " (every tool)"
				}
				fmt.Fprintf(w, "  %s  matcher %s\n", kind, m)
				for i, hd := range r.Handlers {
					fmt.Fprintf(w, "    %d. %s\n", i+1, describeHandler(hd))
				}
			}
		}
	}
}

func describeHandler(h *sandbox.Handler) string {
	var b strings.Builder
	switch h.Type {
	case sandbox.HTTPHandler:
		fmt.Fprintf(&b, "http POST %s", h.URL)
		if len(h.Headers) > 0 {
			// Names only: values stay out of the listing.
			fmt.Fprintf(&b, " headers %s", strings.Join(slices.Sorted(maps.Keys(h.Headers)), ","))
		}
	default:
		fmt.Fprintf(&b, "command %s", h.Command)
	}
	fmt.Fprintf(&b, "  timeout %v", h.Timeout.Round(time.Millisecond))
	if h.FailDeny {
		b.WriteString("  on_failure deny")
	}
	if h.Invalid != "" {
		b.WriteString("  (INVALID: fails when run)")
	}
	return b.String()
}
