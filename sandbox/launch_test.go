package sandbox

import (
	"bufio"
	"context"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
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

// startPlain starts script with sh as the init of c would be started,
// without namespaces, and waits until it prints "ready" (its traps are
// set). started is left open: the init has not started the command yet.
func startPlain(t *testing.T, c *Command, script string) {
	t.Helper()
	c.cmd = exec.Command("sh", "-c", script)
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.started, c.tty = make(chan struct{}), -1
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		t.Fatalf("the script did not get ready: %q, %v", line, err)
	}
}

// TestWaitForwarding: when the context ends, the command gets SIGTERM; a
// command that ignores it is killed after the grace period.
func TestWaitForwarding(t *testing.T) {
	// Each script gives up after a minute (status 3) if no signal comes.
	const loop = `echo ready; i=0; while [ $i -lt 60 ]; do sleep 1 & wait $!; i=$((i+1)); done; exit 3`
	for _, c := range []struct {
		name   string
		script string
		grace  time.Duration
		want   int
	}{
		{"SIGTERM", loop, time.Minute, 128 + int(syscall.SIGTERM)},
		{"trapped SIGTERM", `trap 'exit 7' TERM; ` + loop, time.Minute, 7},
		{"SIGKILL after the grace period", `trap '' TERM; ` + loop, 10 * time.Millisecond, 128 + int(syscall.SIGKILL)},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := &Command{Grace: c.grace, Logger: zerolog.Nop()}
			startPlain(t, cmd, c.script)
			close(cmd.started)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if got := cmd.Wait(ctx); got != c.want {
				t.Errorf("status %d, want %d", got, c.want)
			}
		})
	}
}
