package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netns"
)

// The sandbox client: `gateway sandbox exec -- e2e.test ROLE ARGS` runs this
// test binary inside the sandbox, where it does one thing and prints what
// happened. TestMain chooses it, before the testing flags are parsed, by
// sandboxClientEnv (inherited from the gateway's environment) and the
// arguments.
const sandboxClientEnv = "HOOKGATE_E2E_SANDBOX_CLIENT"

// sandboxOpTimeout bounds one operation of the sandbox client.
const sandboxOpTimeout = 5 * time.Second

// sandboxClientMain runs the sandbox client when this process is one.
func sandboxClientMain() (code int, isClient bool) {
	if os.Getenv(sandboxClientEnv) == "" || len(os.Args) < 2 {
		return 0, false
	}
	switch os.Args[1] {
	case "dns", "udp", "tcp", "ssh", "loopback":
		return runSandboxClient(os.Args[1], os.Args[2:]), true
	}
	return 0, false
}

// runSandboxClient:
//
//	dns NAME           ask 192.0.2.53:53 (any address: DNS is redirected) for A NAME; print "RCODE addr..."
//	udp ADDR           send one datagram; print "reply ..." or "no reply"
//	tcp ADDR PAYLOAD   connect, send PAYLOAD (Go-quoted), print "connected" and what came back
//	loopback           serve on 127.0.0.1 and ::1, connect to each; print "ok ADDR" or the error
//	ssh NAME PORT      resolve NAME as dns does, connect to its first address on PORT, send an
//	                   SSH banner; print what came back
func runSandboxClient(role string, args []string) int {
	switch {
	case role == "loopback" && len(args) == 0:
		for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
			if err := loopbackRoundTrip(addr); err != nil {
				fmt.Println("error", addr, err)
			}
		}
	case role == "dns" && len(args) == 1:
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(args[0]), dns.TypeA)
		c := &dns.Client{Net: "udp", Timeout: sandboxOpTimeout}
		r, _, err := c.Exchange(m, "192.0.2.53:53")
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		out := []string{dns.RcodeToString[r.Rcode]}
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				out = append(out, a.A.String())
			}
		}
		fmt.Println(strings.Join(out, " "))
	case role == "ssh" && len(args) == 2:
		return sandboxSSH(args[0], args[1])
	case role == "udp" && len(args) == 1:
		c, err := net.Dial("udp", args[0])
		if err != nil {
			fmt.Println("no reply: dial:", err)
			return 0
		}
		defer c.Close()
		if _, err := c.Write([]byte("sandbox udp probe")); err != nil {
			fmt.Println("no reply: send:", err)
			return 0
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			fmt.Println("no reply:", err)
			return 0
		}
		fmt.Printf("reply %q\n", buf[:n])
	case role == "tcp" && len(args) == 2:
		payload, err := strconv.Unquote(`"` + args[1] + `"`)
		if err != nil {
			fmt.Println("bad payload:", err)
			return 2
		}
		c, err := net.DialTimeout("tcp", args[0], sandboxOpTimeout)
		if err != nil {
			fmt.Println("dial error:", err)
			return 0
		}
		defer c.Close()
		fmt.Println("connected")
		_ = c.SetDeadline(time.Now().Add(sandboxOpTimeout))
		_, _ = io.WriteString(c, payload)
		b, err := io.ReadAll(io.LimitReader(c, 4096))
		fmt.Printf("got %q (%v)\n", b, err)
	default:
		fmt.Fprintf(os.Stderr, "e2e sandbox client: bad arguments %q\n", append([]string{role}, args...))
		return 2
	}
	return 0
}

// sandboxSSH is the ssh role: what an SSH client does through the
// sandbox's DNS and redirection, with no proxy settings.
func sandboxSSH(name, port string) int {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Net: "udp", Timeout: sandboxOpTimeout}).Exchange(m, "192.0.2.53:53")
	if err != nil {
		fmt.Println("dns error:", err)
		return 1
	}
	var addr string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			addr = a.A.String()
			break
		}
	}
	if addr == "" {
		fmt.Println("no address:", dns.RcodeToString[r.Rcode])
		return 1
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, port), sandboxOpTimeout)
	if err != nil {
		fmt.Println("dial error:", err)
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(sandboxOpTimeout))
	_, _ = io.WriteString(c, "SSH-2.0-sandbox\r\n")
	b, err := io.ReadAll(io.LimitReader(c, 4096))
	fmt.Printf("got %q (%v)\n", b, err)
	return 0
}

// loopbackRoundTrip listens on addr, connects to it, and has the server
// answer one line; it prints "ok ADDR" (the address listened on).
func loopbackRoundTrip(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(sandboxOpTimeout))
		_, err = io.WriteString(c, "hello from the sandbox's own server\n")
		served <- err
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), sandboxOpTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(sandboxOpTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read: %w (got %q)", err, line)
	}
	if err := <-served; err != nil {
		return err
	}
	if line != "hello from the sandbox's own server\n" {
		return fmt.Errorf("got %q from somebody else", line)
	}
	fmt.Println("ok", ln.Addr())
	return nil
}

// onThreadIn runs f on a locked OS thread that has entered ns, and brings
// the thread back (or lets it die with its goroutine if that fails).
func onThreadIn(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = f()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// tapListener counts what reaches a listener the test opened in a test
// namespace (a stand-in for a port the sandbox must not reach).
type tapListener struct {
	name  string
	hits  atomic.Int64
	close func()
}

// tapTCP listens on addr in ns and counts accepted connections.
func tapTCP(t *testing.T, ns netns.NsHandle, addr string) *tapListener {
	t.Helper()
	var ln net.Listener
	if err := onThreadIn(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("tap listener on %s: %v", addr, err)
	}
	tap := &tapListener{name: "tcp " + addr}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tap.hits.Add(1)
			_ = c.Close()
		}
	}()
	tap.close = func() { _ = ln.Close(); wg.Wait() }
	t.Cleanup(tap.close)
	return tap
}

// tapUDP binds addr in ns and counts datagrams.
func tapUDP(t *testing.T, ns netns.NsHandle, addr string) *tapListener {
	t.Helper()
	var pc net.PacketConn
	if err := onThreadIn(ns, func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
		t.Fatalf("tap listener on %s: %v", addr, err)
	}
	tap := &tapListener{name: "udp " + addr}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			tap.hits.Add(1)
		}
	}()
	tap.close = func() { _ = pc.Close(); wg.Wait() }
	t.Cleanup(tap.close)
	return tap
}

// nsState is what a namespace holds that a sandbox run must leave as it was.
type nsState struct {
	links    []string
	nft      []string // family/name of every nftables table
	netnsDir string   // `ip netns list`
	bundles  []string // CA bundles in the gateway's TMPDIR
}

func (s nsState) String() string {
	return fmt.Sprintf("links %v, nftables %v, ip netns list %q, bundles %v", s.links, s.nft, s.netnsDir, s.bundles)
}

func (s nsState) equal(o nsState) bool {
	return slices.Equal(s.links, o.links) && slices.Equal(s.nft, o.nft) &&
		s.netnsDir == o.netnsDir && slices.Equal(s.bundles, o.bundles)
}

// snapshotNS reads the links and nftables tables of the namespace ns (by
// name and handle), the named namespaces, and the CA bundles in tmpDir.
func snapshotNS(t *testing.T, ip, name string, ns netns.NsHandle, tmpDir string) nsState {
	t.Helper()
	var st nsState
	out, err := run(ip, "-n", name, "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			st.links = append(st.links, strings.TrimSuffix(f[1], ":"))
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatalf("listing nftables tables in %s: %v", name, err)
	}
	for _, tb := range tables {
		st.nft = append(st.nft, fmt.Sprintf("%d/%s", tb.Family, tb.Name))
	}
	slices.Sort(st.nft)
	if st.netnsDir, err = run(ip, "netns", "list"); err != nil {
		t.Fatal(err)
	}
	st.bundles, _ = filepath.Glob(filepath.Join(tmpDir, "hookgate-sandbox-ca-*"))
	return st
}

// procsInNetns lists the processes whose network namespace has this inode.
func procsInNetns(inode uint64) []int {
	if inode == 0 {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", inode)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && l == want && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// readyLine is the gateway's "sandbox ready" log line.
type readyLine struct {
	PID   int    `json:"pid"`
	Inode uint64 `json:"netns_inode"`
}

// waitReady waits for the "sandbox ready" line in the log file.
func waitReady(t *testing.T, logPath string, p *proc) readyLine {
	t.Helper()
	var r readyLine
	ok := poll(startTimeout, func() bool {
		if p != nil && p.exited() {
			return true
		}
		b, err := os.ReadFile(logPath)
		if err != nil {
			return false
		}
		found := false
		logLines(t, string(b), func(raw string, fields map[string]any) {
			if fields["message"] == "sandbox ready" {
				if pid, ok := fields["pid"].(float64); ok {
					r.PID = int(pid)
				}
				if ino, ok := fields["netns_inode"].(float64); ok {
					r.Inode = uint64(ino)
				}
				found = true
			}
		})
		return found
	})
	if !ok || r.PID == 0 {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("no \"sandbox ready\" line within %v:\n%s", startTimeout, b)
	}
	return r
}

// scanLines returns the non-empty lines of s.
func scanLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// sandboxUID is the user `gateway sandbox exec` runs the command as when
// no --user is given and there is no SUDO_UID: nobody.
const sandboxUID = 65534

// prepareForUser makes what the sandbox's unprivileged user needs
// reachable, as the README asks of users: the test's directories
// traversable (t.TempDir makes them 0700), the test CA readable (curl
// --cacert), a workspace it owns, and a copy of this test binary (the
// sandbox client) outside Go's private build directory.
func (h *sandboxHarness) prepareForUser() {
	t := h.t
	for _, d := range []string{filepath.Dir(h.dir), h.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(h.caPath, 0o644); err != nil {
		t.Fatal(err)
	}
	h.ws = filepath.Join(h.dir, "workspace")
	if err := os.Mkdir(h.ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(h.ws, sandboxUID, sandboxUID); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.self = filepath.Join(h.dir, "bin", "e2e.test")
	copyFile(t, self, h.self, 0o755)
}

// runBounded runs cmd-like work with a deadline; see sandboxRun.
func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
