// Package sandbox is the hook runtime that runs inside (or builds) the agent
// sandbox: it discovers and strictly decodes hooks.json (root file
// Root/.agents/hooks.json first and authoritative, then the workspace's),
// compiles RE2 matchers (go-re2, anchored to the whole tool name), and runs
// the matching command and HTTP handlers of each tool event in order,
// turning their answers and failures into one allow/deny Decision with one
// log line per handler.
//
//	hooks, problems, err := sandbox.Load(sandbox.LoadOptions{Workspace: dir})
//	runner := sandbox.NewRunner(hooks, sandbox.RunnerOptions{Logger: log, HTTP: client})
//	ev, err := sandbox.NewEvent(sandbox.PreToolExecution, "read_file", args, envID, "")
//	if d := runner.Run(ctx, ev); d.Denied() { /* skip the tool, show d.Reason */ }
package hooks
