package testlog

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestLinesFromConcurrentWriters(t *testing.T) {
	var b Buffer
	log := zerolog.New(&b)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				log.Info().Int("g", g).Int("i", i).Msg("line")
			}
		}()
	}
	wg.Wait()
	lines := b.Lines(t)
	if len(lines) != 200 {
		t.Fatalf("%d lines, want 200", len(lines))
	}
	for _, l := range lines {
		if l["message"] != "line" {
			t.Fatalf("line %v is not one that was logged", l)
		}
	}
}

// Wait wakes on the write that satisfies it, however long the timeout.
func TestWaitWakesOnWrite(t *testing.T) {
	var b Buffer
	release := make(chan struct{})
	go func() {
		<-release
		b.Write([]byte(`{"message":"first"}` + "\n"))
		b.Write([]byte(`{"message":"ready"}` + "\n"))
	}()
	close(release)
	text := b.Wait(t, time.Hour, func(s string) bool { return strings.Contains(s, "ready") })
	if !strings.Contains(text, "first") {
		t.Errorf("Wait returned %q, want both lines", text)
	}
}

// fakeT records a Fatalf instead of stopping the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Logf(string, ...any)   {}

func TestWaitFailsAtTimeout(t *testing.T) {
	var b Buffer
	ft := &fakeT{TB: t}
	b.Wait(ft, 10*time.Millisecond, func(s string) bool { return false })
	if !ft.failed {
		t.Error("Wait for output that never comes did not fail the test")
	}
}

func TestLinesRejectsNonJSON(t *testing.T) {
	var b Buffer
	b.Write([]byte("not json\n"))
	ft := &fakeT{TB: t}
	b.Lines(ft)
	if !ft.failed {
		t.Error("a non-JSON line did not fail the test")
	}
}

func TestReset(t *testing.T) {
	var b Buffer
	b.Write([]byte("secret-canary\n"))
	b.Reset()
	if s := b.String(); s != "" {
		t.Errorf("after Reset the buffer holds %d bytes", len(s))
	}
}
