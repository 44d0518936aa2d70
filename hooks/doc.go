// Package hooks is the tool-execution hook runtime: it loads hooks.json,
// and for each tool call an agent makes it runs the matching hooks and
// turns their answers into one allow/deny Decision. `gateway hooks run`
// uses it; a Go agent runtime can embed it.
//
// A hook event goes through five steps, each in its own file:
//
//  1. Load (load.go, jsonpos.go, headers.go): Root/.agents/hooks.json (the
//     authoritative root file) and Workspace/.agents/hooks.json are decoded
//     strictly, keeping line and column of every value, into Groups of
//     Rules of Handlers. What is wrong is reported as srcpos errors
//     ("file:line:col: severity: field: message"), never fatal: what can be
//     used is used, a broken handler fails when run.
//  2. Match (matcher.go, runner.go): an Event (event.go) names a tool; the
//     rules of enabled groups whose RE2 matcher matches the whole tool name
//     apply, root groups first, in file order.
//  3. Run handlers (runner.go, command.go; HTTP through package hookhttp):
//     each handler gets the event JSON, one after the other, within its
//     timeout and the chain's deadline; a command runs as `sh -c` in its
//     own process group, which is killed when it ends.
//  4. Combine the decision (event.go, runner.go): only a well-formed
//     {"decision": "allow"|"deny"} is an answer; any deny, or a failure of a
//     handler with "on_failure": "deny", denies a pre event, with the
//     reasons joined in order. Post events never deny.
//  5. Log the outcome (runner.go): one line per handler with its outcome
//     (allow, deny, timeout, exit-status, ...) and effect (allow, deny,
//     fail-open, fail-closed, ignored), plus one per load error on every run.
//
// In code:
//
//	hs, problems, err := hooks.Load(hooks.LoadOptions{Workspace: dir})
//	runner := hooks.NewRunner(hs, hooks.RunnerOptions{Logger: log, HTTP: client, LoadProblems: problems})
//	ev, err := hooks.NewEvent(hooks.PreToolExecution, "read_file", args, envID, "")
//	if d := runner.Run(ctx, ev); d.Denied() { /* skip the tool, show d.Reason */ }
package hooks
