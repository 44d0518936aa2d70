package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
)

// fakeNames is a NameMemory holding fixed answers.
type fakeNames struct {
	mu      sync.Mutex
	answers map[resolvedKey][]string
}

func (f *fakeNames) set(client, addr string, names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers == nil {
		f.answers = map[resolvedKey][]string{}
	}
	f.answers[resolvedKey{netip.MustParseAddr(client), netip.MustParseAddr(addr)}] = names
}

func (f *fakeNames) Names(client, addr netip.Addr) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answers[resolvedKey{client, addr}]
}

// rawTransparentGateway serves g's transparent listener on loopback with
// names as its DNS memory; every connection's original destination is
// what orig holds when it arrives.
func rawTransparentGateway(t *testing.T, g *gateway, names NameMemory, orig *atomic.Pointer[netip.AddrPort]) string {
	t.Helper()
	g.srv.names = names
	g.srv.origDst = func(net.Conn) (netip.AddrPort, error) { return *orig.Load(), nil }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.srv.ServeTransparent(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTransparent: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestTransparentRawTunnelByResolvedName(t *testing.T) {
	sshAddr, sshPort := sshLikeServer(t)
	otherAddr, _ := sshLikeServer(t)
	blockedAddr, blockedPort := sshLikeServer(t) // loopback, not exempt
	g := startGateway(t, gatewayConfig{
		allow:    []string{"tls-only.example.com", "git.example.com"},
		exempt:   []string{sshAddr, otherAddr},
		names:    map[string][]string{"git.example.com": {"127.0.0.1"}, "tls-only.example.com": {"127.0.0.1"}},
		entries:  []config.Entry{{}, {Ports: []uint16{443}, RawPorts: []uint16{sshPort, blockedPort}}},
		timeouts: Timeouts{ClientHello: 300 * time.Millisecond, ReadHeader: 300 * time.Millisecond},
	})
	names := &fakeNames{}
	// The same address answered for two names: only git.example.com's
	// entry opens the port raw.
	names.set("127.0.0.1", "127.0.0.1", "tls-only.example.com", "git.example.com")
	var orig atomic.Pointer[netip.AddrPort]
	addr := rawTransparentGateway(t, g, names, &orig)
	aim := func(hostPort string) { ap := netip.MustParseAddrPort(hostPort); orig.Store(&ap) }

	// The client waits for the server, as an SSH client may: after the
	// first-byte wait the tunnel opens and the banner comes through.
	aim(sshAddr)
	c := dialTimeout(t, addr)
	br := bufio.NewReader(c)
	if banner, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(banner, "SSH-2.0-OpenSSH_9.6") {
		t.Fatalf("banner %q, %v", banner, err)
	}
	fmt.Fprintf(c, "SSH-2.0-client\r\n")
	if reply, err := br.ReadString('\n'); err != nil || reply != "ok:SSH-2.0-client\r\n" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	c.Close()
	d := g.logs.waitDecisions(t, 1)[0]
	if d["mode"] != modeRaw || d["transparent"] != true || d["host"] != "git.example.com" || d["verdict"] != "allow" || d["upstream"] != sshAddr {
		t.Fatalf("decision = %v", d)
	}

	// The client speaks first (OpenSSH does): its banner, which starts
	// with a capital letter like an HTTP method, goes to the server.
	c = dialTimeout(t, addr)
	fmt.Fprintf(c, "SSH-2.0-client\r\n")
	br = bufio.NewReader(c)
	if banner, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(banner, "SSH-2.0-OpenSSH_9.6") {
		t.Fatalf("banner %q, %v", banner, err)
	}
	if reply, err := br.ReadString('\n'); err != nil || reply != "ok:SSH-2.0-client\r\n" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	c.Close()
	if d := g.logs.waitDecisions(t, 2)[1]; d["mode"] != modeRaw || d["host"] != "git.example.com" || d["upstream"] != sshAddr {
		t.Fatalf("decision = %v", d)
	}

	refused := func(n int, hostPort string) map[string]any {
		t.Helper()
		aim(hostPort)
		c := dialTimeout(t, addr)
		fmt.Fprintf(c, "SSH-2.0-client\r\n")
		got, _ := bufio.NewReader(c).ReadString('\n')
		if strings.Contains(got, "SSH-2.0-OpenSSH") {
			t.Fatalf("%s: the server's banner reached the client", hostPort)
		}
		d := g.logs.waitDecisions(t, n)[n-1]
		if d["verdict"] == "allow" || d["upstream"] != nil {
			t.Fatalf("%s: decision = %v", hostPort, d)
		}
		return d
	}
	// A port the entry does not list in raw_ports: today's refusal.
	if d := refused(3, otherAddr); d["mode"] == modeRaw {
		t.Fatalf("another port: decision = %v", d)
	}
	// A raw port whose address the address policy refuses (loopback):
	// judged under the name, refused before anything is dialled.
	if d := refused(4, blockedAddr); d["mode"] != modeRaw || d["host"] != "git.example.com" || d["code"] != string(CodeAddressPolicy) {
		t.Fatalf("refused address: decision = %v", d)
	}
	// No answer for this client: nothing to judge but an address.
	names.set("127.0.0.1", "127.0.0.1")
	names.set("127.0.0.2", "127.0.0.1", "git.example.com")
	if d := refused(5, sshAddr); d["mode"] == modeRaw || d["host"] == "git.example.com" {
		t.Fatalf("no DNS answer: decision = %v", d)
	}
}

// A redirected HTTP request or ClientHello on a raw port keeps its usual
// path: only what is neither goes raw.
func TestClassifyFirstBytes(t *testing.T) {
	for in, want := range map[string]firstBytes{
		"":                 firstUndecided,
		"\x16\x03\x01":     firstTLS,
		"G":                firstUndecided,
		"GET ":             firstHTTP,
		"OPTIONS ":         firstHTTP,
		"SSH-2.0-":         firstRaw,
		"GETX":             firstRaw,
		"\x00\x00":         firstRaw,
		"PRI * HTTP/2.0\r": firstHTTP,
	} {
		if got := classifyFirstBytes([]byte(in)); got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

func TestResolvedNames(t *testing.T) {
	r := NewResolvedNames(2)
	now := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return now }
	client, other := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	a, b := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2")

	r.Remember(client, "one.test", []netip.Addr{a}, 30*time.Second)
	r.Remember(client, "two.test", []netip.Addr{a}, 5*time.Second)
	if got := r.Names(client, a); !slices.Equal(got, []string{"two.test", "one.test"}) {
		t.Fatalf("names = %v", got)
	}
	if got := r.Names(other, a); got != nil {
		t.Fatalf("another client: %v", got)
	}
	if got := r.Names(netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:203.0.113.1")); len(got) != 2 {
		t.Fatalf("mapped addresses: %v", got)
	}
	// TTL plus grace, then gone.
	now = now.Add(5*time.Second + ResolvedNamesGrace)
	if got := r.Names(client, a); !slices.Equal(got, []string{"one.test"}) {
		t.Fatalf("after the short TTL: %v", got)
	}
	// Bounded: a third pair evicts the least recently used.
	r.Remember(other, "x.test", []netip.Addr{a}, time.Minute)
	r.Remember(other, "y.test", []netip.Addr{b}, time.Minute)
	if got := r.Names(client, a); got != nil {
		t.Fatalf("evicted pair still answers: %v", got)
	}
}

// On a raw port of a remembered name, an HTTP request and a ClientHello
// keep their usual paths (routed by Host and by SNI), never raw.
func TestTransparentRawPortKeepsHTTPAndTLS(t *testing.T) {
	sshAddr, sshPort := sshLikeServer(t)
	g := startGateway(t, gatewayConfig{
		allow:    []string{"git.example.com"},
		exempt:   []string{sshAddr},
		names:    map[string][]string{"git.example.com": {"127.0.0.1"}},
		entries:  []config.Entry{{RawPorts: []uint16{sshPort}}},
		timeouts: Timeouts{ClientHello: 300 * time.Millisecond},
	})
	names := &fakeNames{}
	names.set("127.0.0.1", "127.0.0.1", "git.example.com")
	var orig atomic.Pointer[netip.AddrPort]
	ap := netip.MustParseAddrPort(sshAddr)
	orig.Store(&ap)
	addr := rawTransparentGateway(t, g, names, &orig)

	c := dialTimeout(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: git.example.com\r\nConnection: close\r\n\r\n")
	_, _ = bufio.NewReader(c).ReadString('\n')
	c.Close()
	if d := g.logs.waitDecisions(t, 1)[0]; d["mode"] != modeHTTP || d["transparent"] != true {
		t.Fatalf("HTTP on a raw port: decision = %v", d)
	}

	c = dialTimeout(t, addr)
	tc := tls.Client(c, &tls.Config{ServerName: "git.example.com"})
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS handshake with an SSH server succeeded")
	}
	c.Close()
	if d := g.logs.waitDecisions(t, 2)[1]; d["mode"] != modeTunnel || d["sni"] != "git.example.com" {
		t.Fatalf("TLS on a raw port: decision = %v", d)
	}
}
