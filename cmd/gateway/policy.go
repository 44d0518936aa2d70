package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/internal/srcpos"
	"github.com/hookgate/hookgate/policy"
	"github.com/hookgate/hookgate/policy/service"
)

const policyUsage = `usage: gateway policy check FILE
       gateway policy test FILE --tool NAME [--args JSON] [--event JSON]
       gateway policy serve --file FILE --listen ADDR [--token-file FILE] [--tls-cert F --tls-key F] [flags]

check  prints the problems of a policy file, or its rules by level; exits 1 on problems.
test   decides one tool call: prints the decision, the rule and its level, and every
       predicate evaluated; exits 0 (allow), 2 (deny) or 3 (ask), 1 on errors.
serve  answers pre-tool hook POSTs of both dialects from the policy:
       POST /v1/hooks/pre_tool_execution, POST /v1/hooks/PreToolUse, GET /metrics.
       SIGHUP reloads the file; SIGTERM/SIGINT shut down.
`

// Exit statuses of policy test besides 0 (allow) and 1 (error).
const (
	exitPolicyDeny = 2
	exitPolicyAsk  = 3
)

func runPolicy(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, policyUsage)
		return fmt.Errorf("%w: policy: missing subcommand (check, test or serve)", errUsage)
	}
	switch args[0] {
	case "check":
		return runPolicyCheck(args[1:], stdout)
	case "test":
		return notDeny(runPolicyTest(ctx, args[1:], stdout, stderr))
	case "serve":
		return runPolicyServe(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, policyUsage)
		return nil
	}
	fmt.Fprint(stderr, policyUsage)
	return fmt.Errorf("%w: policy: unknown subcommand %q", errUsage, args[0])
}

// loadPolicy loads a file, printing its problems one a line to out.
func loadPolicy(file string, out io.Writer) (*policy.Policy, error) {
	p, err := policy.Load(file)
	var errs srcpos.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(out, e)
		}
		return nil, &exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", file, len(errs))}
	}
	return p, err
}

func runPolicyCheck(args []string, stdout io.Writer) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("%w: policy check: want exactly one FILE", errUsage)
	}
	p, err := loadPolicy(args[0], stdout)
	if err != nil {
		return err
	}
	rules := p.Rules()
	fmt.Fprintf(stdout, "%s: ok, %d rules, default %s\n", p.File(), len(rules), p.Default())
	if p.Approver() != "" {
		fmt.Fprintf(stdout, "approver: %s (timeout %s)\n", p.Approver(), p.ApproverTimeout())
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	level := policy.Level(-1)
	for _, r := range rules {
		if r.Rule.Level != level {
			level = r.Rule.Level
			fmt.Fprintf(tw, "level %d (%s):\n", level, level)
		}
		if detail := ruleDetail(r); detail != "" {
			fmt.Fprintf(tw, "  %s\t%s %s\t%s\n", r.Rule.Pos(), r.Action, r.Target, detail)
		} else {
			fmt.Fprintf(tw, "  %s\t%s %s\n", r.Rule.Pos(), r.Action, r.Target)
		}
	}
	return tw.Flush()
}

func ruleDetail(r policy.RuleInfo) string {
	var parts []string
	if r.When != "" {
		parts = append(parts, "when "+r.When)
	}
	if r.Reason != "" {
		parts = append(parts, fmt.Sprintf("reason %q", r.Reason))
	}
	if strings.HasPrefix(r.Rule.Source, "presets") {
		parts = append(parts, "("+r.Rule.Source+")")
	}
	return strings.Join(parts, "  ")
}

func runPolicyTest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy test", "Decide one tool call with a policy file.", stderr)
	tool := fs.String("tool", "", "tool `name` (required)")
	argsJSON := fs.String("args", "{}", "the tool's arguments, a JSON object")
	eventJSON := fs.String("event", "", "the whole hook event, a JSON object (default: {\"tool_call\": {\"name\": TOOL, \"args\": ARGS}})")
	// FILE may come before the flags or after them.
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: policy test: unexpected %q", errUsage, fs.Arg(0))
	}
	if file == "" || *tool == "" {
		return fmt.Errorf("%w: policy test: want FILE and --tool NAME", errUsage)
	}
	in := policy.Input{Tool: *tool}
	if err := json.Unmarshal([]byte(*argsJSON), &in.Args); err != nil || in.Args == nil {
		return fmt.Errorf("%w: policy test: --args must be a JSON object", errUsage)
	}
	if *eventJSON == "" {
		in.Event = map[string]any{"tool_call": map[string]any{"name": in.Tool, "args": in.Args}}
	} else if err := json.Unmarshal([]byte(*eventJSON), &in.Event); err != nil || in.Event == nil {
		return fmt.Errorf("%w: policy test: --event must be a JSON object", errUsage)
	}
	p, err := loadPolicy(file, stdout)
	if err != nil {
		return err
	}
	d, steps := p.Explain(ctx, in)
	fmt.Fprintf(stdout, "decision: %s\n", d.Action)
	if d.Reason != "" {
		fmt.Fprintf(stdout, "reason:   %s\n", d.Reason)
	}
	if d.Rule.Level == policy.LevelDefault {
		fmt.Fprintf(stdout, "rule:     none matched; the default of %s\n", d.Rule.File)
	} else {
		fmt.Fprintf(stdout, "rule:     %s (level %d, %s, %s)\n", d.Rule.Pos(), d.Rule.Level, d.Rule.Level, d.Rule.Source)
	}
	if len(steps) > 0 {
		fmt.Fprintln(stdout, "predicates:")
		for _, s := range steps {
			fmt.Fprintf(stdout, "  %s %s when %s = %s\n", s.Rule.Pos(), s.Action, s.When, s.Result)
		}
	}
	switch d.Action {
	case policy.Deny:
		return &exitError{code: exitPolicyDeny}
	case policy.Ask:
		return &exitError{code: exitPolicyAsk}
	}
	return nil
}

func runPolicyServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy serve", "Answer pre-tool hook POSTs of both dialects from a policy file.\nSIGHUP reloads the file; SIGTERM/SIGINT shut down.", stderr)
	file := fs.String("file", "", "policy `file` (YAML or JSON; required)")
	listen := fs.String("listen", "127.0.0.1:8181", "listen `address`")
	tokenFile := fs.String("token-file", "", "`file` holding the bearer token every request must carry (recommended; without it anyone who reaches the address is answered)")
	proxy := fs.String("proxy", "", "proxy URL for the approver POSTs (default: HTTPS_PROXY from the environment, else direct)")
	caFile := fs.String("ca-file", "", "PEM file of extra CAs to trust for the approver (the gateway's CA)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate `file` (PEM, with its chain); needs --tls-key")
	tlsKey := fs.String("tls-key", "", "private key `file` (PEM) of --tls-cert")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return fmt.Errorf("%w: policy serve: --tls-cert and --tls-key go together", errUsage)
	}
	if *file == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: policy serve: want --file FILE and no other arguments", errUsage)
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("%w: policy serve: --log-level: %v", errUsage, err)
	}
	log := newLogger(stderr, level)
	token, err := readTokenFile(*tokenFile)
	if err != nil {
		return err
	}
	approver, err := hookhttp.New(hookhttp.Options{Version: gatewayVersion(), Proxy: *proxy, CAFile: *caFile})
	if err != nil {
		return fmt.Errorf("policy serve: approver client: %w", err)
	}
	defer approver.Close()
	svc, err := service.New(service.Options{File: *file, Token: token, Approver: approver, Logger: log})
	if err != nil {
		var errs srcpos.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e)
			}
			return &exitError{code: 1, msg: fmt.Sprintf("policy serve: %s: %d problem(s)", *file, len(errs))}
		}
		return err
	}
	// Before anything serves: a SIGHUP must never hit the default action
	// (which ends the process).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("policy serve: %w", err)
	}
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			ln.Close()
			return fmt.Errorf("policy serve: --tls-cert/--tls-key: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: stdlog.New(log, "", 0)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if token == "" && !isLoopbackListen(ln.Addr()) {
		log.Warn().Msg("no --token-file: anyone who reaches this address gets answers")
	}
	log.Info().Str("addr", ln.Addr().String()).Str("policy", *file).Int("rules", len(svc.Policy().Rules())).
		Bool("token", token != "").Bool("tls", *tlsCert != "").Msg("policy service listening")
	for {
		select {
		case <-hup:
			_ = svc.Reload() // logged; the previous policy stays on error
		case err := <-served:
			return fmt.Errorf("policy serve: %w", err)
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
			<-served
			log.Info().Msg("policy service stopped")
			return nil
		}
	}
}

// readTokenFile reads a bearer token; "" when no file is named.
func readTokenFile(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("policy serve: --token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("policy serve: --token-file: %s must hold one token, without spaces", file)
	}
	return token, nil
}

func isLoopbackListen(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
