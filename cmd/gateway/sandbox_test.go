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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
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

func TestSandboxEnv(t *testing.T) {
	const secret = "s3cret-value-42"
	yaml := `network:
  allowlist:
    - domain: api.example.com
      transform:
        Authorization: "Bearer ${env:API_TOKEN}"
        X-Other: "${env:other_token}"
ca: {cert_file: /nonexistent/ca.pem, key_file: /nonexistent/ca-key.pem}
`
	env := map[string]string{"API_TOKEN": secret, "other_token": "other-secret-99"}
	cfg, err := config.Parse("test.yaml", []byte(yaml), config.Options{Transform: transform.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := []string{
		"PATH=/usr/bin", "HOME=/root",
		"API_TOKEN=" + secret, "OTHER_TOKEN=other-secret-99", "COPY=Bearer " + secret,
		"HTTP_PROXY=http://p:1", "https_proxy=http://p:1", "All_Proxy=socks5://p:1", "no_proxy=*",
		"SSL_CERT_FILE=/old.pem", "CURL_CA_BUNDLE=/old.pem",
	}
	got := sandboxEnv(in, cfg, "/tmp/bundle.pem")
	want := []string{
		"PATH=/usr/bin", "HOME=/root",
		"SSL_CERT_FILE=/tmp/bundle.pem", "REQUESTS_CA_BUNDLE=/tmp/bundle.pem", "NODE_EXTRA_CA_CERTS=/tmp/bundle.pem",
		"CURL_CA_BUNDLE=/tmp/bundle.pem", "GIT_SSL_CAINFO=/tmp/bundle.pem",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sandboxEnv:\n got %q\nwant %q", got, want)
	}
	// Without a bundle the CA variables are left as they are.
	got = sandboxEnv([]string{"SSL_CERT_FILE=/mine.pem", "HTTPS_PROXY=x"}, cfg, "")
	if !slices.Equal(got, []string{"SSL_CERT_FILE=/mine.pem"}) {
		t.Errorf("sandboxEnv without bundle: %q", got)
	}
}

func TestExitStatus(t *testing.T) {
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
		if got := exitStatus(cmd.ProcessState); got != c.want {
			t.Errorf("%q: status %d, want %d", c.script, got, c.want)
		}
	}
	if exitStatus(nil) != 1 {
		t.Error("nil state: want 1")
	}
}

func TestWriteCABundle(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	sys := filepath.Join(tmp, "system.pem")
	if err := os.WriteFile(sys, []byte("-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", sys)
	ours := filepath.Join(tmp, "ca.pem")
	if err := os.WriteFile(ours, []byte("-----BEGIN CERTIFICATE-----\nours\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A bundle of a gateway that is gone, and one of a live process (us).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, bundlePrefix+strconv.Itoa(dead.Process.Pid)+"-1.pem")
	live := filepath.Join(tmp, bundlePrefix+strconv.Itoa(os.Getppid())+"-2.pem")
	for _, f := range []string{stale, live} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	path, err := writeCABundle(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nours\n-----END CERTIFICATE-----\n"; string(b) != want {
		t.Errorf("bundle:\n%s\nwant:\n%s", b, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode: %v %v, want 0644", st.Mode(), err)
	}
	if !strings.HasPrefix(filepath.Base(path), bundlePrefix+strconv.Itoa(os.Getpid())+"-") || filepath.Dir(path) != tmp {
		t.Errorf("bundle path %s", path)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale bundle of a dead gateway not removed: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("bundle of a live process removed: %v", err)
	}
	if _, err := writeCABundle(filepath.Join(tmp, "missing.pem")); err == nil || !strings.Contains(err.Error(), "ca.cert_file") {
		t.Errorf("missing CA: %v", err)
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
	nobody, _ := resolveSandboxUser("", func(string) string { return "" })
	stdout, stderr, code = runCLI(t, "sandbox", "exec", "--workspace", "/", "--", "sh", "-c", `echo "$(id -u)"`)
	if want := fmt.Sprintf("%d\n", nobody.uid); code != 0 || stdout != want || nobody.uid == 0 {
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

func TestResolveSandboxUser(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	nobody, err := resolveSandboxUser("", env())
	if err != nil || nobody.source != "nobody" || nobody.uid == 0 || nobody.gid == 0 {
		t.Fatalf("default: %+v, %v; want nobody", nobody, err)
	}
	for _, c := range []struct {
		flag       string
		env        []string
		uid, gid   uint32
		source     string
		wantErr    string
		wantNobody bool
	}{
		{flag: "", env: []string{"SUDO_UID", "1234", "SUDO_GID", "5678"}, uid: 1234, gid: 5678, source: "SUDO_UID"},
		{flag: "", env: []string{"SUDO_UID", "0", "SUDO_GID", "0"}, wantNobody: true},
		{flag: "0", uid: 0, gid: 0, source: "--user"},
		{flag: "root", uid: 0, gid: 0, source: "--user"},
		{flag: "1234:99", env: []string{"SUDO_UID", "1"}, uid: 1234, gid: 99, source: "--user"},
		{flag: "54321", uid: 54321, gid: 54321, source: "--user"}, // not in the database: gid = uid
		{flag: "hookgate-no-such-user", wantErr: `no such user "hookgate-no-such-user"`},
		{flag: "1:hookgate-no-such-group", wantErr: `no such group "hookgate-no-such-group"`},
		{flag: "-1", wantErr: "no such user"},
		{flag: "4294967295", wantErr: "no such user"},
		{flag: "", env: []string{"SUDO_UID", "x"}, wantErr: "SUDO_UID"},
	} {
		u, err := resolveSandboxUser(c.flag, env(c.env...))
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("--user %q, env %q: %+v, %v; want error %q", c.flag, c.env, u, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("--user %q, env %q: %v", c.flag, c.env, err)
		case c.wantNobody:
			if u != nobody {
				t.Errorf("--user %q, env %q: %+v, want nobody %+v", c.flag, c.env, u, nobody)
			}
		case u.uid != c.uid || u.gid != c.gid || u.source != c.source:
			t.Errorf("--user %q, env %q: %+v, want %d:%d from %s", c.flag, c.env, u, c.uid, c.gid, c.source)
		}
	}
}

func TestUserEnv(t *testing.T) {
	got := userEnv([]string{"HOME=/root", "PATH=/bin", "USER=root"}, sandboxUser{uid: 1000, gid: 1000, name: "dev", home: "/home/dev"})
	want := []string{"PATH=/bin", "HOME=/home/dev", "USER=dev", "LOGNAME=dev"}
	if !slices.Equal(got, want) {
		t.Errorf("userEnv: %q, want %q", got, want)
	}
	// Unknown to the user database: left alone.
	in := []string{"HOME=/root"}
	if got := userEnv(in, sandboxUser{uid: 54321, gid: 54321}); !slices.Equal(got, in) {
		t.Errorf("userEnv without a name: %q", got)
	}
}
