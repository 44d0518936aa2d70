package hooks

// Ungated returns the tools, of those given, that no pre-tool gate covers:
// no enabled group has a pre_tool_execution or PreToolUse rule with a
// handler whose matcher matches the tool. Any handler type counts as a
// gate (a policy, a command, an HTTP hook); the dialect does not matter,
// since a caller of either dialect runs the groups of both.
func (h *Hooks) Ungated(tools []string) []string {
	var out []string
	for _, tool := range tools {
		if !h.gated(tool) {
			out = append(out, tool)
		}
	}
	return out
}

func (h *Hooks) gated(tool string) bool {
	for _, g := range h.Groups {
		if !g.Enabled {
			continue
		}
		for _, kind := range []EventKind{PreToolExecution, PreToolUse} {
			for _, r := range g.Rules[kind] {
				if len(r.Handlers) > 0 && r.Matcher.Match(tool) {
					return true
				}
			}
		}
	}
	return false
}
