// Package testlog collects log output for tests. A Buffer is the io.Writer
// a test hands to zerolog (or to a child process): safe for the concurrent
// writes of a server's goroutines, read back as text or as decoded JSON
// lines, and waited on until a line of interest arrives, so that tests wait
// on the event rather than for a while.
package testlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a log sink safe for concurrent use. The zero value is ready.
type Buffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced on every Write
}

// Write appends p and wakes every Wait.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset discards what was written: the log of a failed test that may hold
// a secret must not be printed.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Lines returns the JSON lines written so far, decoded. A line that is not
// JSON fails the test.
func (b *Buffer) Lines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// Wait returns once done holds for what has been written, checking after
// each write, and fails the test if it does not within timeout. It returns
// the text that satisfied done.
func (b *Buffer) Wait(t testing.TB, timeout time.Duration, done func(text string) bool) string {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		b.mu.Lock()
		text := b.buf.String()
		if b.written == nil {
			b.written = make(chan struct{})
		}
		written := b.written
		b.mu.Unlock()
		if done(text) {
			return text
		}
		select {
		case <-written:
		case <-timer.C:
			t.Fatalf("the awaited log output did not arrive within %v; the log holds %d bytes", timeout, len(text))
			return ""
		}
	}
}
