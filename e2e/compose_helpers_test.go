package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	hgnetns "github.com/hookgate/hookgate/sandbox/netns"

	"github.com/hookgate/hookgate/internal/testlog"
)

// Helpers of TestComposeTopology (compose_test.go).

// etcNetnsDir is where `ip netns exec NAME` finds the files it bind-mounts
// over /etc (resolv.conf, hosts) for the command it runs.
const etcNetnsDir = "/etc/netns"

// repoRoot is the module's root directory (the tests run in e2e/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// buildReceiver builds examples/receiver into dir (with -race when the tests
// have it), bounded like the gateway's build.
func buildReceiver(t *testing.T, root, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		if r := os.Getenv("GOROOT"); r != "" {
			goTool = filepath.Join(r, "bin", "go")
		} else {
			t.Fatalf("building the example receiver: no go command in PATH: %v", err)
		}
	}
	bin := filepath.Join(dir, "receiver")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./examples/receiver")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v (%v)\n%s", args, err, ctx.Err(), out)
	}
	return bin
}

// copyFile copies src to dst byte for byte, with mode perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, perm); err != nil {
		t.Fatal(err)
	}
}

// setEtcNetns writes files (name → content) into /etc/netns/<ns>, where
// `ip netns exec <ns>` bind-mounts them over /etc/<name>. t.Cleanup removes
// the directory, and /etc/netns itself if this call created it and it is
// empty. Directories left by test processes that died are removed first.
func setEtcNetns(t *testing.T, ns string, files map[string]string) {
	t.Helper()
	if ents, err := os.ReadDir(etcNetnsDir); err == nil {
		for _, e := range ents {
			m := staleNetns.FindStringSubmatch(e.Name()) // the names setupNetns makes
			if m == nil {
				continue
			}
			pid, err := strconv.Atoi(m[1])
			if err != nil || pid == os.Getpid() || processAlive(pid) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(etcNetnsDir, e.Name())); err == nil {
				t.Logf("removed stale %s", filepath.Join(etcNetnsDir, e.Name()))
			}
		}
	}
	_, statErr := os.Stat(etcNetnsDir)
	createdTop := errors.Is(statErr, os.ErrNotExist)
	dir := filepath.Join(etcNetnsDir, ns)
	// Registered before anything is written: a half-made directory goes too.
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if createdTop {
			_ = os.Remove(etcNetnsDir) // only if empty: someone else may use it
		}
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		skipOrFail(t, "creating %s: %v", dir, err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// embeddedDNS stands in for Docker's embedded DNS server (127.0.0.11): it
// answers A queries for the names in its table, NOERROR with no answer for
// other types of those names, NXDOMAIN for the rest, and records every
// question. It serves UDP and TCP on a loopback address of a test
// namespace, from sockets this process made there.
type embeddedDNS struct {
	table map[string]netip.Addr // FQDN, lower case
	mu    sync.Mutex
	seen  []string // "name. TYPE"
	stop  func()
}

func (e *embeddedDNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		e.mu.Lock()
		e.seen = append(e.seen, name+" "+dns.TypeToString[q.Qtype])
		e.mu.Unlock()
		a, ok := e.table[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 600},
				A:   net.IP(a.AsSlice()),
			})
		}
	}
	_ = w.WriteMsg(m)
}

// questions returns what the server was asked so far.
func (e *embeddedDNS) questions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// startEmbeddedDNS serves on addr (port 53) inside ns until t's cleanup.
func startEmbeddedDNS(t *testing.T, ns netns.NsHandle, addr string, table map[string]netip.Addr) *embeddedDNS {
	t.Helper()
	e := &embeddedDNS{table: table}
	var pc net.PacketConn
	var ln net.Listener
	if err := onThreadIn(ns, func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			_ = pc.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("embedded DNS on %s: %v", addr, err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: e}
	tcp := &dns.Server{Listener: ln, Handler: e}
	var wg sync.WaitGroup
	for _, s := range []*dns.Server{udp, tcp} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.ActivateAndServe()
		}()
	}
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_ = udp.ShutdownContext(ctx)
			_ = tcp.ShutdownContext(ctx)
			_ = pc.Close()
			_ = ln.Close()
			wg.Wait()
		})
	}
	t.Cleanup(e.stop)
	return e
}

// nsResult is what one bounded command in a namespace did.
type nsResult struct {
	stdout, stderr string
	exit           int // 128+N when killed by signal N
}

// runInNetns runs argv in namespace ns with exactly env, in dir, for at most
// d, and waits for it. Only failing to run it at all is fatal.
func runInNetns(t *testing.T, ip, ns string, env []string, dir string, d time.Duration, argv ...string) nsResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, ip, append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr testlog.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := nsResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.exit = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.exit = 128 + int(ws.Signal())
		}
	default:
		t.Fatalf("%q in %s: %v (timeout %v)\nstdout:\n%s\nstderr:\n%s", argv, ns, err, d, res.stdout, res.stderr)
	}
	return res
}

// realPython returns a python3 that can run without a shell wrapper (pyenv's
// shims need pyenv's environment): the first of dirs that has one, else the
// interpreter python3 in PATH reports as sys.executable.
func realPython(dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, "python3")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := run(p, "-c", "import sys; print(sys.executable)")
	if err != nil {
		return "", err
	}
	exe := strings.TrimSpace(out)
	if exe == "" {
		return "", fmt.Errorf("%s reports no sys.executable", p)
	}
	return exe, nil
}

// tableInNetns reports whether the nftables table "hookgate" exists in ns,
// read by a locked thread that entered it.
func tableInNetns(ns netns.NsHandle) (bool, error) {
	var exists bool
	err := onThreadIn(ns, func() (err error) {
		exists, err = hgnetns.TableExists()
		return err
	})
	return exists, err
}

// netnsInode is the inode of a namespace handle, as /proc/PID/ns/net shows it.
func netnsInode(ns netns.NsHandle) uint64 {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(ns), &st); err != nil {
		return 0
	}
	return st.Ino
}

// fileEnv reads the environment of a running process (NUL-separated).
func fileEnv(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range strings.Split(string(b), "\x00") {
		if kv != "" {
			out = append(out, kv)
		}
	}
	return out, nil
}

// clientIn is an HTTP client whose sockets are made in ns (plain HTTP, or
// TLS trusting roots), one connection per request. pin maps host:port to
// the address to dial instead: nothing is resolved with the host's resolver.
func clientIn(ns netns.NsHandle, roots *x509.CertPool, pin map[string]string) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if a, ok := pin[addr]; ok {
				addr = a
			}
			if _, err := netip.ParseAddrPort(addr); err != nil {
				return nil, fmt.Errorf("test client: %s is not pinned to an address", addr)
			}
			return dialIn(ctx, ns, network, addr)
		},
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 10 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: curlTimeout}
}

// fetch does one request with c and returns the status and the body.
func fetch(c *http.Client, method, url string, hdr http.Header) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(""))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, err
}
