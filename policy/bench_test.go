package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// thousandRules is a 1,000-rule policy with predicates: 400 tools with a
// predicated deny and an allow each, 190 predicated prefix rules over 95
// servers, ten predicated "*" denies and a final "*" allow.
func thousandRules() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 400 {
		fmt.Fprintf(&b, "  - deny: tool_%d\n    when: 'args.CommandLine.matches(\"rm\\\\s+-rf\") || args.CommandLine.contains(\"secret_%d\")'\n", i, i)
		fmt.Fprintf(&b, "  - allow: tool_%d\n", i)
	}
	for i := range 95 {
		fmt.Fprintf(&b, "  - deny: {prefix: \"mcp__srv%d__\"}\n    when: 'tool.endsWith(\"_delete\")'\n", i)
		fmt.Fprintf(&b, "  - allow: {prefix: \"mcp__srv%d__\"}\n    when: 'has(args.id)'\n", i)
	}
	for i := range 9 {
		fmt.Fprintf(&b, "  - deny: \"*\"\n    when: 'event.environment_id == \"env_blocked_%d\"'\n", i)
	}
	b.WriteString("  - allow: \"*\"\n")
	return b.String()
}

func TestThousandRules(t *testing.T) {
	p := mustParse(t, thousandRules())
	if n := len(p.Rules()); n != 1000 {
		t.Fatalf("%d rules", n)
	}
	if d := decide(p, "tool_7", map[string]any{"CommandLine": "rm -rf /"}); d.Action != Deny || d.Rule.Level != LevelToolDeny {
		t.Fatalf("%+v", d)
	}
	if d := decide(p, "mcp__srv3__x_delete", map[string]any{"id": 1.0}); d.Action != Deny || d.Rule.Level != LevelPrefixDeny {
		t.Fatalf("%+v", d)
	}
}

// BenchmarkDecide1000Rules measures decisions against the 1,000-rule
// policy, mixing a tool rule, a prefix rule and the "*" rules, and reports
// the median and p99 latency of one decision.
func BenchmarkDecide1000Rules(b *testing.B) {
	p := mustParse(b, thousandRules())
	inputs := []Input{
		{Tool: "tool_123", Args: map[string]any{"CommandLine": "go test ./...", "Cwd": "/workspace"}},
		{Tool: "mcp__srv42__get_issue", Args: map[string]any{"id": 17.0}},
		{Tool: "view_file", Args: map[string]any{"AbsolutePath": "/workspace/a.go"}, Event: map[string]any{"environment_id": "env_1"}},
	}
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in := inputs[i%len(inputs)]
		start := time.Now()
		d := p.Decide(ctx, in)
		lat = append(lat, time.Since(start))
		if d.Action != Allow {
			b.Fatalf("%s: %+v", in.Tool, d)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-µs")
}
