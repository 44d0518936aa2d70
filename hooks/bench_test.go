package hooks

import (
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
