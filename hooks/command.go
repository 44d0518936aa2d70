package hooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Caps on what a command handler may print.
const (
	maxStdout = 1 << 20  // the decision JSON; more is a bad-response
	maxStderr = 64 << 10 // kept for the log line (its tail is logged)
)

// shPath is the shell that runs command handlers, resolved once.
var shPath = sync.OnceValue(func() string {
	if p, err := exec.LookPath("sh"); err == nil {
		return p
	}
	return "/bin/sh"
})

// cappedBuffer keeps the first max bytes written and discards the rest,
// never failing, so the writer on the other end of the pipe is drained.
type cappedBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := b.max - len(b.buf)
	if len(p) > room {
		b.truncated = true
		b.buf = append(b.buf, p[:max(room, 0)]...)
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

// commandResult is what running a command handler produced.
type commandResult struct {
	outcome  Outcome // a failure outcome, or "" when the command exited 0
	detail   string
	stdout   []byte
	stderr   []byte
	timedOut bool
}

// runCommand runs `sh -c command` in dir, with payload on stdin, in its own
// process group. When ctx ends (the handler's timeout or the chain's
// deadline) the whole group gets SIGTERM, then SIGKILL after grace. When
// the shell exits, whatever it left in its group is killed: a hook leaves
// nothing running.
func runCommand(ctx context.Context, command, dir string, env []string, payload []byte, grace time.Duration) (res commandResult) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return commandResult{outcome: OutcomeSpawnError, detail: "pipe: " + err.Error()}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return commandResult{outcome: OutcomeSpawnError, detail: "pipe: " + err.Error()}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return commandResult{outcome: OutcomeSpawnError, detail: "pipe: " + err.Error()}
	}

	cmd := exec.Command(shPath(), "-c", command)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// The child has its copies; ours of its ends must go, or EOF never comes.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return commandResult{outcome: OutcomeSpawnError, detail: err.Error()}
	}
	pgid := cmd.Process.Pid

	var wg sync.WaitGroup
	stdout := &cappedBuffer{max: maxStdout}
	stderr := &cappedBuffer{max: maxStderr}
	wg.Add(3)
	go func() {
		defer wg.Done()
		// A command that does not read its stdin gets EPIPE here; fine.
		_, _ = inW.Write(payload)
		inW.Close()
	}()
	go func() { defer wg.Done(); _, _ = io.Copy(stdout, outR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(stderr, errR) }()

	// Wait for the shell to exit without reaping it (WNOWAIT): while it is a
	// zombie its pid cannot be reused, so signalling the group -pgid is
	// safe until cmd.Wait reaps it below.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pgid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()

	select {
	case <-exited:
	case <-ctx.Done():
		res.timedOut = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-exited:
		case <-t.C:
		}
		t.Stop()
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	// No orphans: whatever the shell started and left behind in its group
	// dies with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	waitErr := cmd.Wait()

	// The group is gone, so the pipes reach EOF, unless a process escaped
	// the group (setsid) holding them: bound the wait.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(250 * time.Millisecond):
		past := time.Now().Add(-time.Second)
		_ = outR.SetReadDeadline(past)
		_ = errR.SetReadDeadline(past)
		inW.Close()
		<-done
	}
	outR.Close()
	errR.Close()

	res.stdout, res.stderr = stdout.buf, stderr.buf
	switch {
	case res.timedOut:
		res.outcome = OutcomeTimeout
	case waitErr != nil:
		res.outcome = OutcomeExitStatus
		res.detail = describeExit(waitErr)
	case stdout.truncated:
		res.outcome = OutcomeBadResponse
		res.detail = fmt.Sprintf("output exceeds %d bytes", maxStdout)
	}
	return res
}

func describeExit(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err.Error()
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return ee.Error()
	}
	if ws.Signaled() {
		return "killed by signal " + unix.SignalName(ws.Signal())
	}
	switch code := ws.ExitStatus(); code {
	case 126:
		return "exit status 126 (command not executable)"
	case 127:
		return "exit status 127 (command not found)"
	default:
		return fmt.Sprintf("exit status %d", code)
	}
}
