package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/hooks"
	"github.com/hookgate/hookgate/internal/srcpos"
)

// maxEventSize bounds the event JSON read from stdin.
const maxEventSize = 16 << 20

const hooksUsage = `usage: gateway hooks run EVENT [flags] < event.json
       gateway hooks check [flags]

run    runs the hooks of .agents/hooks.json and /.agents/hooks.json for one tool
       event read on stdin, prints the decision JSON and exits 0 (allow) or 2 (deny).
       EVENT is pre_tool_execution or post_tool_execution.
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
	strictDefault, err := strictFromEnv()
	if err != nil {
		return err
	}
	fs := newFlagSet("hooks run", "", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, hooksRunUsage)
		fs.PrintDefaults()
	}
	strict := fs.Bool("strict", strictDefault, "deny (pre events) when a hooks.json has errors, instead of running what loaded and allowing\n(default from "+strictEnv+"=1)")
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
	kind, err := hooks.ParseEventKind(kindArg)
	if err != nil {
		return fmt.Errorf("%w: hooks run: %v", errUsage, err)
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("%w: hooks run: --log-level: %v", errUsage, err)
	}
	// No level hides load errors (logged at error level): a broken
	// hooks.json must never pass unnoticed.
	log := newLogger(stderr, min(level, zerolog.ErrorLevel))

	data, err := io.ReadAll(io.LimitReader(stdin, maxEventSize+1))
	if err != nil {
		return fmt.Errorf("hooks run: reading the event: %w", err)
	}
	if len(data) > maxEventSize {
		return fmt.Errorf("%w: hooks run: event larger than %d bytes", errUsage, maxEventSize)
	}
	ev, err := hooks.ParseEvent(kind, data, *envID)
	if err != nil {
		return fmt.Errorf("%w: hooks run: %v", errUsage, err)
	}

	loaded, problems, err := hooks.Load(hooks.LoadOptions{Workspace: *workspace, Root: *root})
	if err != nil {
		if !*strict {
			return err
		}
		// A file that exists but cannot be read is the worst load error:
		// strict mode denies on it like on any other.
		loaded, problems = &hooks.Hooks{Workspace: *workspace}, srcpos.Errors{{Severity: srcpos.SeverityError, File: hooks.HooksFile, Msg: err.Error()}}
	}
	for _, p := range problems {
		if p.Severity != srcpos.SeverityError { // errors: logged by the runner on every run
			log.Warn().Str("problem", p.Error()).Msg("hooks.json")
		}
	}

	client, err := hookhttp.New(hookhttp.Options{Version: gatewayVersion(), Proxy: *proxy, CAFile: *caFile})
	if err != nil {
		return fmt.Errorf("hooks run: %w", err)
	}
	defer client.Close()

	runner := hooks.NewRunner(loaded, hooks.RunnerOptions{Logger: log, HTTP: client, Deadline: *deadline,
		LoadProblems: problems, FailClosedOnLoadError: *strict})
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

// strictEnv turns on --strict for `hooks run` from the environment, for
// runtimes that cannot change the command line.
const strictEnv = "HOOKGATE_HOOKS_STRICT"

func strictFromEnv() (bool, error) {
	v := os.Getenv(strictEnv)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: want 1 or 0", errUsage, strictEnv, v)
	}
	return b, nil
}

const hooksRunUsage = `usage: gateway hooks run EVENT [flags] < event.json

Run the hooks for one tool event. EVENT is pre_tool_execution or
post_tool_execution; the event JSON is read on stdin. Prints the decision
JSON and exits 0 (allow) or 2 (deny); 1 on a usage error.

flags:
`

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
	loaded, problems, err := hooks.Load(hooks.LoadOptions{Workspace: *workspace, Root: *root})
	if err != nil {
		return err
	}
	printHooks(stdout, loaded)
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "\n%d problem(s):\n", len(problems))
		for _, p := range problems {
			fmt.Fprintln(stdout, "  "+p.Error())
		}
	}
	if problems.HasErrors() {
		return &exitError{code: 1}
	}
	return nil
}

func printHooks(w io.Writer, h *hooks.Hooks) {
	fmt.Fprintln(w, "looked for (root first):")
	for _, f := range h.Searched {
		state := "not found"
		if slices.Contains(h.Files, f) {
			state = "loaded"
		}
		fmt.Fprintf(w, "  %s  (%s)\n", f, state)
	}
	if len(h.Files) == 0 {
		fmt.Fprintln(w, "no hooks.json found: no hooks run")
		return
	}
	fmt.Fprintf(w, "commands run in: %s\n", h.Workspace)
	for _, g := range h.Groups {
		state := "enabled"
		if !g.Enabled {
			state = "disabled"
		}
		fmt.Fprintf(w, "\ngroup %q (%s)  %s:%d\n", g.Name, state, g.File, g.Line)
		for _, kind := range []hooks.EventKind{hooks.PreToolExecution, hooks.PostToolExecution} {
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

func describeHandler(h *hooks.Handler) string {
	var b strings.Builder
	switch h.Type {
	case hooks.HTTPHandler:
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
