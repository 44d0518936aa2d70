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
	"github.com/hookgate/hookgate/policy"
)

// maxEventSize bounds the event JSON read from stdin.
const maxEventSize = 16 << 20

const hooksUsage = `usage: gateway hooks run EVENT [flags] < event.json
       gateway hooks check [flags]
       gateway hooks list [--json] [flags]
       gateway hooks enable|disable GROUP [--file F] [flags]

run      runs the hooks of every hooks.json found for one event read on stdin,
         prints the combined answer JSON and exits 0, or 2 for a deny.
         EVENT is pre_tool_execution or post_tool_execution (remote-sandbox
         dialect), or SessionStart, PreToolUse, PostToolUse, PreInvocation,
         PostInvocation or Stop (agent-CLI dialect).
check    prints every group, matcher and handler loaded, and the problems found;
         exits 1 when there are errors. With --require-gate, also exits 1 when
         a write or execution tool (write_file, code_execution, run_command,
         write_to_file, ...) has no enabled pre-tool handler matching it.
list     one row per loaded hook: file, dialect, group, event, matcher, handler,
         enabled, problems.
enable   sets "enabled" of a group in its hooks.json, changing nothing else in
disable  the file; the root file's groups cannot be changed.

Files (in load and run order): ROOT/.agents/hooks.json (authoritative), each
--workspace's .agents/hooks.json, the --global file, every --plugins DIR/*/hooks.json.
`

func runHooks(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, hooksUsage)
		return fmt.Errorf("%w: hooks: missing subcommand (run, check, list, enable or disable)", errUsage)
	}
	switch args[0] {
	case "run":
		return notDeny(runHooksRun(ctx, args[1:], stdin, stdout, stderr))
	case "check":
		return runHooksCheck(args[1:], stdout, stderr)
	case "list":
		return runHooksList(args[1:], stdout, stderr)
	case "enable", "disable":
		return runHooksSetEnabled(args[0] == "enable", args[1:], stdout, stderr)
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
	where := addDiscoveryFlags(fs)
	envID := fs.String("environment-id", "", "environment_id (conversationId for agent-CLI events) to add to the event when it has none")
	proxy := fs.String("proxy", "", "proxy URL for HTTP hooks (default: HTTPS_PROXY from the environment, else direct)")
	caFile := fs.String("ca-file", "", "PEM file of extra CAs to trust for HTTP hooks (the gateway's CA)")
	logLevel := fs.String("log-level", "info", "log level of the per-handler lines on stderr: debug, info, warn, error, disabled")
	deadline := fs.Duration("deadline", 0, "overall deadline for all the event's hooks (0: only each handler's timeout)")
	kindArg, err := parseWithArg(fs, args, "hooks run")
	if err != nil {
		return err
	}
	if kindArg == "" {
		return fmt.Errorf("%w: hooks run: missing event (pre_tool_execution, post_tool_execution, SessionStart, PreToolUse, PostToolUse, PreInvocation, PostInvocation or Stop)", errUsage)
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

	loaded, problems, err := hooks.Load(where.options())
	if err != nil {
		if !*strict {
			return err
		}
		// A file that exists but cannot be read is the worst load error:
		// strict mode denies on it like on any other.
		loaded, problems = &hooks.Hooks{Workspace: where.options().Workspace}, srcpos.Errors{{Severity: srcpos.SeverityError, File: hooks.HooksFile, Msg: err.Error()}}
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

Run the hooks for one event. EVENT is pre_tool_execution or
post_tool_execution (remote-sandbox dialect), or SessionStart, PreToolUse,
PostToolUse, PreInvocation, PostInvocation or Stop (agent-CLI dialect); the
event JSON, in that dialect, is read on stdin. Every handler gets it in its
own file's dialect. Prints the combined answer in the event's dialect and
exits 0, or 2 for a deny; 1 on a usage error.

flags:
`

func runHooksCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hooks check", "print the hooks that were loaded and the problems found", stderr)
	where := addDiscoveryFlags(fs)
	requireGate := fs.Bool("require-gate", false, "fail unless every write and execution tool (of both agent vocabularies) has a pre-tool gate:\nan enabled pre_tool_execution or PreToolUse handler whose matcher matches it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hooks check: unexpected argument %q", errUsage, fs.Arg(0))
	}
	loaded, problems, err := hooks.Load(where.options())
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
	var ungated []string
	if *requireGate {
		ungated = loaded.Ungated(policy.WriteAndExecTools())
	}
	switch {
	case len(ungated) > 0:
		return &exitError{code: 1, msg: fmt.Sprintf("hooks check --require-gate: write and execution tools reachable with no pre-tool gate: %s "+
			`(add an enabled pre_tool_execution or PreToolUse rule matching them, e.g. {"matcher": "*", "hooks": [{"type": "policy", "file": "policy.yaml"}]})`,
			strings.Join(ungated, ", "))}
	case problems.HasErrors():
		return &exitError{code: 1}
	}
	return nil
}

func printHooks(w io.Writer, h *hooks.Hooks) {
	fmt.Fprintln(w, "looked for (in load order, root first):")
	for _, src := range h.Sources {
		state, role := "not found", string(src.Kind)
		if src.Found {
			state = "loaded"
			if src.Dialect != "" {
				role += ", " + string(src.Dialect) + " dialect"
			}
		}
		fmt.Fprintf(w, "  %s  (%s)  %s\n", src.Path, state, role)
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
		for _, kind := range hooks.EventKinds() {
			for _, r := range g.Rules[kind] {
				m := describeMatcher(kind, r.Matcher)
				fmt.Fprintf(w, "  %s  matcher %s\n", kind, m)
				for i, hd := range r.Handlers {
					fmt.Fprintf(w, "    %d. %s\n", i+1, describeHandler(hd))
				}
			}
		}
	}
}

// describeMatcher shows a rule's matcher, and what it means.
func describeMatcher(kind hooks.EventKind, m *hooks.Matcher) string {
	if !kind.HasTool() {
		return "(none: every " + string(kind) + ")"
	}
	s := fmt.Sprintf("%q", m.Pattern())
	switch {
	case m.Err() != nil:
		s += " (INVALID: matches nothing)"
	case m.MatchesAll():
		s += " (every tool)"
	}
	return s
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
	case hooks.PolicyHandler:
		fmt.Fprintf(&b, "policy %s (in process; pre-tool events only)", h.PolicyFile)
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
