// Package hooks is the hook runtime of agents: it loads hooks.json, and
// for each event (a tool call, a session start, a model invocation, a stop)
// it runs the matching hooks and combines their answers into one Decision.
// `gateway hooks run` uses it; a Go agent runtime can embed it.
//
// Two dialects of hooks.json are served by the one runtime, one dialect
// per file: the remote-sandbox dialect (pre_tool_execution,
// post_tool_execution; snake_case payloads; allow/deny) and the agent-CLI
// dialect (SessionStart, PreToolUse, PostToolUse, PreInvocation,
// PostInvocation, Stop; camelCase payloads; ask, auto_approve, overwrite,
// injectSteps, ...). A caller of either dialect runs the hooks of both;
// each handler gets the payload in its own file's dialect.
//
// An event goes through five steps, each in its own file:
//
//  1. Load (load.go, jsonpos.go, headers.go): Root/.agents/hooks.json (the
//     authoritative root file), the workspaces' .agents/hooks.json, the
//     global file and the plugins' files are decoded strictly, keeping line
//     and column of every value, into Groups of Rules of Handlers, each
//     file in its dialect. What is wrong is reported as srcpos errors
//     ("file:line:col: severity: field: message"), never fatal: what can be
//     used is used, a broken handler fails when run.
//  2. Match (matcher.go, runner.go): an Event (event.go) names its kind
//     and, for tool events, a tool; each enabled group's rules for that
//     event in its own dialect apply when their RE2 matcher matches the
//     whole tool name, in load order.
//  3. Run handlers (runner.go, handlerkind.go, command.go,
//     policyhandler.go; HTTP through package hookhttp): each handler gets
//     the event JSON in its dialect (payload.go), one after the other,
//     within its timeout and the chain's deadline; a command runs as
//     `sh -c` in its own process group, which is killed when it ends; a
//     policy handler decides pre-tool events in process with package
//     policy (and does nothing on other events).
//  4. Combine the answers (decision.go, combine.go): a well-formed answer
//     of the event's schema counts, anything else is a failure that fails
//     open (unless "on_failure": "deny" on a pre event). The strictest
//     verdict wins; a deny ends an agent-CLI chain; overwrites chain;
//     inject steps concatenate. Post events never deny.
//  5. Log the outcome (runner.go): one line per handler with its outcome
//     (allow, deny, ask, answered, timeout, exit-status, ...) and effect
//     (allow, deny, fail-open, fail-closed, ignored, ...), plus one per load
//     error on every run.
//
// In code:
//
//	hs, problems, err := hooks.Load(hooks.LoadOptions{Workspace: dir})
//	runner := hooks.NewRunner(hs, hooks.RunnerOptions{Logger: log, HTTP: client, LoadProblems: problems})
//	ev, err := hooks.NewEvent(hooks.PreToolExecution, "read_file", args, envID, "")
//	if d := runner.Run(ctx, ev); d.Denied() { /* skip the tool, show d.Reason */ }
package hooks
