package hooks

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkBareExecTrue is the floor: exec `true` directly.
func BenchmarkBareExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBareShTrue is what a command hook costs at least: `sh -c true`
// with an event on stdin and stdout captured, via os/exec.
func BenchmarkBareShTrue(b *testing.B) {
	payload := []byte(`{"tool_call":{"name":"code_execution","args":{"code":"ls"}},"environment_id":"env"}`)
	for b.Loop() {
		cmd := exec.Command(shPath(), "-c", "true")
		cmd.Stdin = strings.NewReader(string(payload))
		if _, err := cmd.Output(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunnerCommandTrue: a full Run with one matching command hook
// running `true` (a fail-open bad-response: empty output), logging on.
// Overhead per handler = this − BenchmarkBareShTrue.
func BenchmarkRunnerCommandTrue(b *testing.B) {
	e := env{root: b.TempDir(), ws: b.TempDir()}
	writeFile(b, e.ws+"/"+HooksFile, oneHook(cmdHook("true", "")))
	h, _, err := Load(LoadOptions{Workspace: e.ws, Root: e.root})
	if err != nil {
		b.Fatal(err)
	}
	r := NewRunner(h, RunnerOptions{Logger: zerolog.New(io.Discard)})
	ev, _ := NewEvent(PreToolExecution, "code_execution", []byte(`{"code":"ls"}`), "env", "")
	ctx := b.Context()
	for b.Loop() {
		if d := r.Run(ctx, ev); len(d.Results) != 1 || d.Results[0].Outcome != OutcomeBadResponse {
			b.Fatalf("%+v", d)
		}
	}
}

func hundredGroups(b *testing.B, pattern func(i int) string) *Runner {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range 100 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"g%d": {"pre_tool_execution": [{"matcher": %q, "hooks": [{"command": "true"}]}]}`, i, pattern(i))
	}
	sb.WriteString("}")
	groups, ps := compileFile("bench.json", []byte(sb.String()))
	if ps.HasErrors() {
		b.Fatal(ps)
	}
	return NewRunner(&Hooks{Groups: groups}, RunnerOptions{})
}

var mixed = func(i int) string {
	switch i % 4 {
	case 0:
		return "code_execution"
	case 1:
		return "read_file|write_file"
	case 2:
		return ".*_file"
	default:
		return fmt.Sprintf("tool_%d.*", i)
	}
}

// BenchmarkMatch100Groups matches one tool name against 100 groups.
func BenchmarkMatch100Groups(b *testing.B) {
	for _, bc := range []struct {
		name    string
		pattern func(int) string
	}{
		{"mixed", mixed},
		{"all-regex", func(i int) string { return fmt.Sprintf("(tool_%d|.*_file)", i) }},
		{"literal", func(i int) string { return fmt.Sprintf("tool_%d|write_file", i) }},
	} {
		r := hundredGroups(b, bc.pattern)
		b.Run(bc.name+"/uncached", func(b *testing.B) {
			for b.Loop() {
				if len(r.computeMatches(PreToolExecution, "write_file")) == 0 {
					b.Fatal("no match")
				}
			}
		})
		b.Run(bc.name+"/cached", func(b *testing.B) {
			for b.Loop() {
				if len(r.matching(PreToolExecution, "write_file")) == 0 {
					b.Fatal("no match")
				}
			}
		})
	}
}

// BenchmarkHTTPHookRoundTrip: a Run with one HTTP hook to a loopback TLS
// server (keep-alive), reporting the median.
func BenchmarkHTTPHookRoundTrip(b *testing.B) {
	srv, ca := tlsServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"decision":"allow"}`))
	}))
	groups, _ := compileFile("b.json", []byte(oneHook(httpHook(srv.URL, ""))))
	client := httpClient(b, ca)
	r := NewRunner(&Hooks{Groups: groups}, RunnerOptions{HTTP: client, Logger: zerolog.New(io.Discard)})
	ev, _ := NewEvent(PreToolExecution, "read_file", []byte(`{"path":"x"}`), "env", "")
	ctx := b.Context()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if d := r.Run(ctx, ev); d.Results[0].Outcome != OutcomeAllow {
			b.Fatalf("%+v", d.Results[0])
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}

// tenKiBPayload is an agent-CLI PreToolUse event of about 10 KiB: a file
// write whose content is most of it, plus the common fields.
func tenKiBPayload(b *testing.B) Event {
	content := strings.Repeat(`line of "code" with \\ escapes and text `, 10<<10/42)
	args := mustJSONb(b, map[string]any{"TargetFile": "/workspace/project/main.go", "CodeContent": content, "Overwrite": true})
	payload := `{"toolCall": {"name": "write_to_file", "args": ` + args + `}, "stepIdx": 19, ` + commonFields + `}`
	ev, err := ParseEvent(PreToolUse, []byte(payload), "")
	if err != nil {
		b.Fatal(err)
	}
	if len(ev.Payload) < 10<<10 {
		b.Fatalf("payload is %d bytes", len(ev.Payload))
	}
	return ev
}

func mustJSONb(b *testing.B, v any) string {
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return string(out)
}

// BenchmarkConvertPayload10KiB: what the dialect conversion adds per
// handler for a 10 KiB payload, both ways.
func BenchmarkConvertPayload10KiB(b *testing.B) {
	ev := tenKiBPayload(b)
	remote, err := convertPayload(ev.Payload, DialectCLI, DialectRemote)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cli-to-remote", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Payload)))
		for b.Loop() {
			if _, err := convertPayload(ev.Payload, DialectCLI, DialectRemote); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remote-to-cli", func(b *testing.B) {
		b.SetBytes(int64(len(remote)))
		for b.Loop() {
			if _, err := convertPayload(remote, DialectRemote, DialectCLI); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An overwrite rewrites the args in the payload that later handlers get.
	over := []rawMember{{key: "TargetFile", val: []byte(`"/workspace/project/other.go"`)}}
	b.Run("overwrite", func(b *testing.B) {
		for b.Loop() {
			if _, err := withArgs(ev.Payload, DialectCLI, over); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMatch100RulesCLI matches one tool against 100 agent-CLI
// PreToolUse rules, and a remote-sandbox event against them (converted
// event name).
func BenchmarkMatch100RulesCLI(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range 100 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"g%d": {"PreToolUse": [{"matcher": %q, "hooks": [{"command": "true"}]}]}`, i, mixed(i))
	}
	sb.WriteString("}")
	groups, ps := compileFile("bench.json", []byte(sb.String()))
	if ps.HasErrors() {
		b.Fatal(ps)
	}
	r := NewRunner(&Hooks{Groups: groups}, RunnerOptions{})
	for _, kind := range []EventKind{PreToolUse, PreToolExecution} {
		b.Run(string(kind)+"/uncached", func(b *testing.B) {
			for b.Loop() {
				if len(r.computeMatches(kind, "write_file")) == 0 {
					b.Fatal("no match")
				}
			}
		})
		b.Run(string(kind)+"/cached", func(b *testing.B) {
			for b.Loop() {
				if len(r.matching(kind, "write_file")) == 0 {
					b.Fatal("no match")
				}
			}
		})
	}
}
