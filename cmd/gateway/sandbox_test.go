package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/sandbox"
	"github.com/hookgate/hookgate/transform"
)

func TestSandboxUsageErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"sandbox"}, 2, "no subcommand"},
		{"unknown subcommand", []string{"sandbox", "run"}, 2, `unknown subcommand "run"`},
		{"no command", []string{"sandbox", "exec"}, 2, "no command given"},
		{"no command after --", []string{"sandbox", "exec", "--"}, 2, "no command given"},
		{"bad workspace", []string{"sandbox", "exec", "--workspace", "/nonexistent/hookgate", "--", "true"}, 2, "not a directory"},
		{"bad flag", []string{"sandbox", "exec", "--nope", "--", "true"}, 2, "nope"},
		{"command not found", []string{"sandbox", "exec", "--", "/nonexistent/hookgate-cmd"}, 127, "hookgate-cmd"},
		{"unknown user", []string{"sandbox", "exec", "--user", "hookgate-no-such-user", "--", "true"}, 2, `--user "hookgate-no-such-user": no such user`},
		{"unknown group", []string{"sandbox", "exec", "--user", "1:hookgate-no-such-group", "--", "true"}, 2, `no such group "hookgate-no-such-group"`},
		{"init by hand", []string{"sandbox", "__init"}, 2, `unknown subcommand "__init"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("code %d, stderr %q; want %d and %q", code, stderr, c.code, c.want)
			}
		})
	}
	out, _, code := runCLI(t, "sandbox", "--help")
	if code != 0 || !strings.Contains(out, "gateway sandbox exec") {
		t.Errorf("sandbox --help: code %d, %q", code, out)
	}
}

// TestSandboxExecRuns runs a real sandbox (root only; CI must run it): the
// command runs in the workspace, in the sandbox namespace, as the user
// asked for, with every capability set empty and no_new_privs.
func TestSandboxExecRuns(t *testing.T) {
	requireSandboxRoot(t)
	ws := userWorkspace(t, 12345, 23456)
	script := `test "$(pwd)" = "$1" || exit 9; grep -q hg0: /proc/net/dev || exit 8; ` +
		`echo written > file || exit 6; id -u; id -g; ` +
		`grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status; exit 3`
	stdout, stderr, code := runCLI(t, "sandbox", "exec", "--workspace", ws, "--user", "12345:23456", "--",
		"sh", "-c", script, "sh", ws)
	if code != 3 {
		t.Fatalf("exit code %d, want 3 (9: wrong directory, 8: not in the sandbox, 6: workspace not writable)\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	want := "12345\n23456\n" +
		"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" +
		"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
	if stdout != want {
		t.Errorf("the command's ids and capabilities:\n%s\nwant:\n%s", stdout, want)
	}
	if st, err := os.Stat(filepath.Join(ws, "file")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 12345 {
		t.Errorf("the file the command wrote: %v %v, want it owned by 12345", st, err)
	}
	if !strings.Contains(stderr, `"sandbox ready"`) || !strings.Contains(stderr, `"user":"12345:23456"`) {
		t.Errorf("no ready line naming the user in the log: %q", stderr)
	}
}

// TestSandboxExecNoTerminalInjection: the ioctls that push input into a
// terminal fail with EPERM, even on a stdin that is no terminal (where
// they would fail with ENOTTY): the seccomp filter refuses them first.
// Other ioctls are untouched.
func TestSandboxExecNoTerminalInjection(t *testing.T) {
	requireSandboxRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but no python3: %v", err)
		}
		t.Skipf("no python3: %v", err)
	}
	script := `python3 -c '
import errno, fcntl, termios
for name, req in (("TIOCSTI", termios.TIOCSTI), ("TIOCLINUX", 0x541C), ("TIOCSTI, high bits set", 0x100005412), ("TIOCGWINSZ", termios.TIOCGWINSZ)):
    try:
        fcntl.ioctl(0, req, b"12345678")
        print(name, "allowed")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
'`
	stdout, stderr, code := runCLI(t, "sandbox", "exec", "--workspace", "/", "--", "sh", "-c", script)
	want := "TIOCSTI EPERM\nTIOCLINUX EPERM\nTIOCSTI, high bits set EPERM\nTIOCGWINSZ ENOTTY\n"
	if code != 0 || stdout != want {
		t.Errorf("code %d, stdout:\n%s\nwant:\n%s\nstderr %q", code, stdout, want, stderr)
	}
}

// TestSandboxExecDefaultUser: without --user, the user behind sudo, else
// nobody; never root.
func TestSandboxExecDefaultUser(t *testing.T) {
	requireSandboxRoot(t)
	ws := userWorkspace(t, 4321, 4321)
	t.Setenv("SUDO_UID", "4321")
	t.Setenv("SUDO_GID", "4321")
	stdout, stderr, code := runCLI(t, "sandbox", "exec", "--workspace", ws, "--", "sh", "-c", `echo "$(id -u):$(id -g)"`)
	if code != 0 || stdout != "4321:4321\n" {
		t.Errorf("with SUDO_UID: code %d, stdout %q, want 4321:4321\nstderr %q", code, stdout, stderr)
	}
	t.Setenv("SUDO_UID", "0") // root behind sudo is no reason to run as root
	nobody, _ := sandbox.DefaultUser(func(string) string { return "" })
	stdout, stderr, code = runCLI(t, "sandbox", "exec", "--workspace", "/", "--", "sh", "-c", `echo "$(id -u)"`)
	if want := fmt.Sprintf("%d\n", nobody.UID); code != 0 || stdout != want || nobody.UID == 0 {
		t.Errorf("without a user: code %d, stdout %q, want %q\nstderr %q", code, stdout, want, stderr)
	}
	// Root only when asked for, loudly, and still without capabilities.
	stdout, stderr, code = runCLI(t, "sandbox", "exec", "--workspace", "/", "--user", "0", "--",
		"sh", "-c", `id -u; grep ^CapEff: /proc/self/status`)
	if code != 0 || stdout != "0\nCapEff:\t0000000000000000\n" || !strings.Contains(stderr, "runs as ROOT inside the sandbox") {
		t.Errorf("--user 0: code %d, stdout %q\nstderr %q", code, stdout, stderr)
	}
}

// TestSandboxExecUnreachableWorkspace: a workspace the user cannot enter is
// a clear failure, before the command runs.
func TestSandboxExecUnreachableWorkspace(t *testing.T) {
	requireSandboxRoot(t)
	ws := t.TempDir() // 0700, root's
	_, stderr, code := runCLI(t, "sandbox", "exec", "--workspace", ws, "--user", "12345", "--", "sh", "-c", "echo ran")
	if code != 126 || !strings.Contains(stderr, "gateway: sandbox exec: starting sh as 12345:12345 in "+ws+": permission denied") {
		t.Errorf("code %d, stderr %q; want 126 and the permission error", code, stderr)
	}
}

// requireSandboxRoot skips without root, but fails when CI=true.
func requireSandboxRoot(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "linux" && os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but the sandbox test cannot run (%s, euid %d)", runtime.GOOS, os.Geteuid())
	}
	t.Skip("the sandbox needs root (set CI=true to make this a failure)")
}

// userWorkspace is a directory uid:gid owns and can reach (t.TempDir's
// parent is 0700).
func userWorkspace(t *testing.T, uid, gid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hookgate-sandbox-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, uid, gid); err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestSandboxNeedsRoot: the message a user without privileges gets, exactly
// (as root, the test binary runs itself as nobody).
func TestSandboxNeedsRoot(t *testing.T) {
	const want = "gateway: sandbox exec needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run it with sudo (creating a network namespace: operation not permitted)\n"
	var stdout, stderr string
	var code int
	if os.Geteuid() != 0 {
		stdout, stderr, code = runCLI(t, "sandbox", "exec", "--", "true")
	} else {
		stdout, stderr, code = runSelfAsNobody(t, "sandbox", "exec", "--", "true")
	}
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("without root: code %d, stdout %q, stderr:\n%q\nwant:\n%q", code, stdout, stderr, want)
	}
}

// runSelfAsNobody runs a copy of the test binary as the gateway (main) as
// uid and gid 65534, from a directory it can enter.
func runSelfAsNobody(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "hookgate-sandbox-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gateway")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOOKGATE_TEST_RUN_MAIN=1", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running the gateway as nobody: %v", err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// sandboxExecHelp is the whole of `gateway sandbox exec --help`.
const sandboxExecHelp = `usage: gateway sandbox exec [flags] -- CMD [ARGS...]

Run CMD in a new network namespace whose only way out is the gateway: all its
TCP (IPv4 and IPv6) goes to the gateway's transparent listener, DNS to the
gateway's DNS server, and everything else is dropped; TCP to the sandbox's own
loopback stays local. CMD needs no proxy settings; it gets a CA bundle that
trusts the gateway's CA. Its exit status becomes the gateway's (128+N when it
dies of signal N).

CMD runs in its own PID and mount namespace (a /proc of its own), as an
unprivileged user (--user; default: the user behind sudo, else nobody), with
no capabilities and no_new_privs: it cannot change the rules, leave the
namespace or regain privileges. The user must be able to enter the workspace.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).

flags:
  -config file
    	gateway config file (YAML or JSON); default: the built-in configs/gateway.yaml
  -grace duration
    	after forwarding SIGINT/SIGTERM to the command, how long to wait before SIGKILL (default 10s)
  -log file
    	write the gateway's log to this file instead of stderr
  -test-allow-upstream IP:PORT
    	FOR TESTS ONLY: exempt exactly this IP:PORT from the address policy (repeatable)
  -upstream-ca file
    	extra root certificates file (PEM) for upstream TLS, on top of upstream.ca_file
  -user UID[:GID]
    	run the command as UID[:GID] (numbers or names); default: SUDO_UID:SUDO_GID, else nobody. 0 (root) only when given here, and still without capabilities
  -workspace directory
    	working directory of the command; default: the current one
`

func TestSandboxHelp(t *testing.T) {
	stdout, stderr, code := runCLI(t, "sandbox", "exec", "--help")
	if code != 0 || stderr != "" || stdout != sandboxExecHelp {
		t.Errorf("sandbox exec --help: code %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, stdout, sandboxExecHelp)
	}
	usage, _, _ := strings.Cut(sandboxExecHelp, "\nflags:\n")
	stdout, _, code = runCLI(t, "sandbox", "--help")
	if code != 0 || stdout != usage {
		t.Errorf("sandbox --help: code %d, stdout:\n%s\nwant:\n%s", code, stdout, usage)
	}
}

// TestSandboxUser: --user wins over the user behind sudo, and says so.
func TestSandboxUser(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"SUDO_UID": "1234", "SUDO_GID": "5678"}[k]
	}
	u, err := sandboxUser("54321:99", getenv)
	if err != nil || u.UID != 54321 || u.GID != 99 || u.Source != "--user" {
		t.Errorf("--user 54321:99 with SUDO_UID: %+v, %v", u, err)
	}
	u, err = sandboxUser("", getenv)
	if err != nil || u.UID != 1234 || u.GID != 5678 || u.Source != "SUDO_UID" {
		t.Errorf("no --user, SUDO_UID 1234: %+v, %v", u, err)
	}
}

// TestSandboxEnvFromConfig: the variables the config's transforms read
// secrets from, and their values, do not reach the command; "$${env:X}"
// is literal text, not a reference, so X stays.
func TestSandboxEnvFromConfig(t *testing.T) {
	const secret = "s3cret-value-42"
	yaml := `network:
  allowlist:
    - domain: api.example.com
      transform:
        Authorization: "Bearer ${env:API_TOKEN}"
    - domain: other.example.com
      transform:
        X-Literal: "$${env:NOT_A_SECRET}"
ca: {cert_file: /nonexistent/ca.pem, key_file: /nonexistent/ca-key.pem}
`
	env := map[string]string{"API_TOKEN": secret}
	cfg, err := config.Parse("test.yaml", []byte(yaml), config.Options{Transform: transform.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := []string{"PATH=/usr/bin", "API_TOKEN=" + secret, "COPY=Bearer " + secret, "NOT_A_SECRET=kept"}
	got := sandbox.CommandEnv(in, configTransforms(cfg), "")
	if want := []string{"PATH=/usr/bin", "NOT_A_SECRET=kept"}; !slices.Equal(got, want) {
		t.Errorf("the command's environment: %d variables, want %q", len(got), want)
	}
}
