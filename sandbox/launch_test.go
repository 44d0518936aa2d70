package sandbox

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestShellStatus(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -TERM $$", 128 + 15},
		{"kill -KILL $$", 128 + 9},
	} {
		cmd := exec.Command("sh", "-c", c.script)
		_ = cmd.Run()
		if got := shellStatus(cmd.ProcessState); got != c.want {
			t.Errorf("%q: status %d, want %d", c.script, got, c.want)
		}
	}
	if shellStatus(nil) != 1 {
		t.Error("nil state: want 1")
	}
}

// TestInitArgs: what Command.Start puts on the init's command line is what
// IsInit recognises, and RunInit reads back.
func TestInitArgs(t *testing.T) {
	argv := []string{"sh", "-c", "echo hi"}
	args := initArgs(User{UID: 1000, GID: 100}, "/ws", "/bin/sh", argv)
	if !IsInit(args) {
		t.Fatalf("IsInit(%q) = false", args)
	}
	if want := append([]string{"sandbox", "__init", "1000", "100", "/ws", "/bin/sh"}, argv...); !slices.Equal(args, want) {
		t.Errorf("initArgs = %q, want %q", args, want)
	}
	for _, args := range [][]string{nil, {"sandbox"}, {"sandbox", "exec"}, {"__init"}, {"hooks", "__init"}} {
		if IsInit(args) {
			t.Errorf("IsInit(%q) = true", args)
		}
	}
}

// TestRunInitByHand: outside a sandbox's PID namespace the init refuses to
// run, with a usage error (the test process is not PID 1).
func TestRunInitByHand(t *testing.T) {
	var stderr strings.Builder
	code := RunInit([]string{"sandbox", "__init", "0", "0", "/", "/bin/true", "true"}, &stderr)
	if want := "gateway: usage: sandbox __init is started by `gateway sandbox exec`, not by hand\n"; code != 2 || stderr.String() != want {
		t.Errorf("code %d, stderr %q; want 2 and %q", code, stderr.String(), want)
	}
}
