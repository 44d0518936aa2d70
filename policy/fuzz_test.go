package policy

import (
	"context"
	"errors"
	"testing"

	"github.com/hookgate/hookgate/internal/srcpos"
)

// FuzzParse: no input makes the loader panic, every refusal is a list of
// positioned problems, and whatever loads can decide.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"rules:\n  - deny: run_command\n    when: 'args.CommandLine.matches(\"rm\")'\n  - allow: \"*\"\n",
		"default: deny\nrules:\n  - allow: [view_file, list_dir]\n  - ask: {prefix: mcp__gh__, tools: [a]}\n",
		"presets: [confirm_run_command, {workspace_only: {paths: [/workspace]}}]\n",
		`{"rules": [{"deny": "*"}], "approver": "https://a.example/x", "approver_timeout": "5s"}`,
		"a: &a [*a]\nrules: *a\n",
		"rules:\n  - deny: x\n    when: |\n      tool.glob('*')\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			var errs srcpos.Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("an error that is not srcpos.Errors: %v", err)
			}
			return
		}
		for _, tool := range []string{"run_command", "mcp__gh__a", "x"} {
			d := p.Decide(context.Background(), Input{Tool: tool, Args: map[string]any{"CommandLine": "rm -rf /", "path": "/workspace/a"}})
			switch d.Action {
			case Allow, Ask, Deny:
			default:
				t.Fatalf("decision %q", d.Action)
			}
		}
	})
}
