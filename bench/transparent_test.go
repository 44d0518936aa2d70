package main

import (
	"os"
	"testing"
)

// The marks a sandboxed client writes are found however its output is
// split into writes, and the result line after them is kept whole.
func TestMarkWriterFindsSplitMarks(t *testing.T) {
	w := &markWriter{}
	w.setGateway(os.Getpid())
	out := cpuMarkLine + "\nnoise\n" + cpuMarkLine + "\n{\"m\":{}}\n"
	for i := 0; i < len(out); i += 3 { // three bytes per write
		if _, err := w.Write([]byte(out[i:min(i+3, len(out))])); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.marks) != 2 {
		t.Fatalf("marks = %d, want 2", len(w.marks))
	}
	if got := string(lastLine(w.bytes())); got != "{\"m\":{}}\n" && got != "{\"m\":{}}" {
		t.Fatalf("last line = %q", got)
	}
	m := measurement{OtherOnGatewayCPU: 0.5, OtherOnBenchCPU: 0.5}
	w.fillGateway(&m)
	if m.GatewayCPU < 0 || m.OtherOnGatewayCPU > 0.5 || m.OtherOnBenchCPU > 0.5 {
		t.Fatalf("measurement after marks = %+v", m)
	}
}
