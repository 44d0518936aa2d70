package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/hookgate/hookgate/internal/testlog"
)

// cmdTimeout bounds every setup command (ip ...).
const cmdTimeout = 20 * time.Second

// skipOrFail skips the test, or fails it when CI=true: CI must run it.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but the end-to-end test cannot run: %s", msg)
	}
	t.Skipf("skipping the end-to-end test: %s (set CI=true to make this a failure)", msg)
}

// requireE2E checks what the test needs and returns the paths of ip and curl.
func requireE2E(t *testing.T) (ipPath, curlPath string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		skipOrFail(t, "network namespaces need Linux, not %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "network namespaces need root (euid %d)", os.Geteuid())
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		skipOrFail(t, "no ip command (iproute2): %v", err)
	}
	curlPath, err = exec.LookPath("curl")
	if err != nil {
		skipOrFail(t, "no curl command: %v", err)
	}
	if gatewayBuildErr != nil {
		t.Fatalf("building the gateway: %v", gatewayBuildErr)
	}
	return ipPath, curlPath
}

// run runs a short setup command, bounded in time, and returns its output.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// staleNetns matches the namespaces this test creates; the number is the pid
// of the test process that made them.
var staleNetns = regexp.MustCompile(`^hg-e2e-(?:gw|up|sa|sb)-([0-9]+)$`)

// removeStaleNetns deletes namespaces left by test processes that died
// without cleaning up (killed with SIGKILL, say). Only names this test makes,
// and only when the process that made them is gone.
func removeStaleNetns(t *testing.T, ip string) {
	t.Helper()
	out, err := run(ip, "netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m := staleNetns.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if processAlive(pid) {
			continue
		}
		if _, err := run(ip, "netns", "del", fields[0]); err != nil {
			t.Logf("removing stale namespace %s: %v", fields[0], err)
		} else {
			t.Logf("removed stale namespace %s", fields[0])
		}
	}
}

// processAlive reports whether pid is a running process (not a zombie).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// topology is the two namespaces and the veth pair between them.
type topology struct {
	ip           string
	gwNS, upNS   string
	gwDev, upDev string
}

// setupNetns creates the namespaces and the link; t.Cleanup deletes them
// (deleting a namespace deletes its end of the veth pair, and with it the
// other end). Any failure skips, or fails under CI.
func setupNetns(t *testing.T, ip string) *topology {
	t.Helper()
	removeStaleNetns(t, ip)
	pid := strconv.Itoa(os.Getpid())
	topo := &topology{
		ip:    ip,
		gwNS:  "hg-e2e-gw-" + pid,
		upNS:  "hg-e2e-up-" + pid,
		gwDev: "hg-gw-" + pid, // interface names are at most 15 bytes
		upDev: "hg-up-" + pid,
	}
	for _, ns := range []string{topo.gwNS, topo.upNS} {
		if _, err := run(ip, "netns", "add", ns); err != nil {
			skipOrFail(t, "creating network namespace: %v", err)
		}
		t.Cleanup(func() {
			if _, err := run(ip, "netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		// No IPv6 at all: nothing but the IPv4 link below leaves lo.
		for _, conf := range []string{"all", "default"} {
			if _, err := run(ip, "netns", "exec", ns, "sh", "-c",
				"echo 1 > /proc/sys/net/ipv6/conf/"+conf+"/disable_ipv6"); err != nil {
				t.Logf("disabling IPv6 in %s (not fatal): %v", ns, err)
			}
		}
	}
	// Create each end directly in its namespace, never in the root one.
	if _, err := run(ip, "link", "add", topo.gwDev, "netns", topo.gwNS, "type", "veth",
		"peer", "name", topo.upDev, "netns", topo.upNS); err != nil {
		skipOrFail(t, "creating the veth pair: %v", err)
	}
	steps := [][]string{
		{"-n", topo.gwNS, "link", "set", "lo", "up"},
		{"-n", topo.upNS, "link", "set", "lo", "up"},
		{"-n", topo.gwNS, "addr", "add", gatewayIP.String() + "/24", "dev", topo.gwDev},
		{"-n", topo.upNS, "addr", "add", upstreamIP.String() + "/24", "dev", topo.upDev},
		{"-n", topo.gwNS, "link", "set", topo.gwDev, "up"},
		{"-n", topo.upNS, "link", "set", topo.upDev, "up"},
	}
	for _, s := range steps {
		if _, err := run(ip, s...); err != nil {
			skipOrFail(t, "configuring the namespaces: %v", err)
		}
	}
	return topo
}

// proc is a long-running process the test started; t.Cleanup kills it.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *testlog.Buffer
	stderr *testlog.Buffer
	done   chan struct{}
	err    error // valid after done is closed
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the process to end.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// startIn starts argv in namespace ns. The process is killed when the test
// process dies (SIGKILL as parent-death signal) and by t.Cleanup otherwise;
// the cleanup waits, bounded, for it to be gone before the namespaces go.
// If stdin is not nil it becomes the process's stdin, and this process's copy
// of it is closed once the process has started.
func startIn(t *testing.T, ip, ns, name string, env []string, stdin *os.File, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(ip, append([]string{"netns", "exec", ns}, argv...)...)
	p.cmd.Env = env
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	if stdin != nil {
		p.cmd.Stdin = stdin
	}
	p.cmd.WaitDelay = 5 * time.Second
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	if stdin != nil {
		_ = stdin.Close()
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill() // by pid; `ip netns exec` execs in place
		}
		if !p.wait(15 * time.Second) {
			t.Errorf("cleanup: %s (pid %d) did not exit after SIGKILL", name, p.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr.String())
			if s := p.stdout.String(); s != "" {
				t.Logf("%s stdout:\n%s", name, s)
			}
		}
	})
	return p
}

// dialIn connects to addr from inside the namespace ns: the socket is made
// by a thread that has entered ns (and keeps it for its whole life), so the
// test process can be a client of the gateway's loopback listener.
func dialIn(ctx context.Context, ns netns.NsHandle, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		// Back to where the thread came from; if that fails the thread
		// stays locked and dies with this goroutine.
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
