package dnsserver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
	"github.com/miekg/dns"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/testlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeResolver answers from a table and counts every lookup. A name in
// hang blocks until the lookup's context ends.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr // "ip4 name." -> addresses
	hang    map[string]bool         // "name."
	delay   time.Duration           // every lookup takes this long
	calls   []string                // "ip4 name."
	// started gets a value (when it has room) as each lookup begins.
	started chan struct{}
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{answers: map[string][]netip.Addr{}, hang: map[string]bool{}, started: make(chan struct{}, 1)}
}

// set gives name (rooted) the addresses, split by family.
func (f *fakeResolver) set(name string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		k := "ip6 " + name
		if a.Is4() {
			k = "ip4 " + name
		}
		f.answers[k] = append(f.answers[k], a)
	}
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	k := network + " " + host
	f.calls = append(f.calls, k)
	addrs, ok := f.answers[k]
	hang, delay := f.hang[host], f.delay
	f.mu.Unlock()
	select {
	case f.started <- struct{}{}:
	default:
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if hang {
		<-ctx.Done()
		return nil, &net.DNSError{Err: "i/o timeout", Name: host, IsTimeout: true}
	}
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

func (f *fakeResolver) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func mustPolicy(t testing.TB, domains ...string) *config.Policy {
	t.Helper()
	al, err := allowlist.New(domains)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &config.Policy{Allowlist: al, Addrs: ap}
}

// testEnv is a server on loopback UDP and TCP with a fake upstream.
type testEnv struct {
	srv       *Server
	res       *fakeResolver
	pol       atomic.Pointer[config.Policy]
	log       *testlog.Buffer
	udp, tcp  string
	decisions chan Decision
}

func startEnv(t *testing.T, o Options, domains ...string) *testEnv {
	t.Helper()
	e := &testEnv{res: newFakeResolver(), log: &testlog.Buffer{}, decisions: make(chan Decision, 100)}
	e.pol.Store(mustPolicy(t, domains...))
	o.Policy = e.pol.Load
	o.Resolver = e.res
	o.Logger = zerolog.New(e.log)
	o.OnDecision = func(d Decision) {
		select {
		case e.decisions <- d:
		default:
		}
	}
	e.srv = New(o)

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.udp, e.tcp = pc.LocalAddr().String(), ln.Addr().String()
	errc := make(chan error, 2)
	go func() { errc <- e.srv.ServeUDP(pc) }()
	go func() { errc <- e.srv.ServeTCP(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		// A test that ends at once can shut the server down before a
		// Serve goroutine has begun: that Serve then returns
		// net.ErrClosed, as documented.
		for range 2 {
			if err := <-errc; err != nil && !errors.Is(err, net.ErrClosed) {
				t.Errorf("Serve returned %v after Shutdown", err)
			}
		}
	})
	return e
}

// query asks over UDP (or TCP) and fails the test on a transport error.
func (e *testEnv) query(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return e.exchange(t, network, m)
}

func (e *testEnv) exchange(t *testing.T, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	addr := e.udp
	if network == "tcp" {
		addr = e.tcp
	}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("exchange %s %s: %v", network, m.Question[0].String(), err)
	}
	if r.Id != m.Id || !r.Response || !r.RecursionAvailable {
		t.Fatalf("reply header: id %d (want %d), qr %v, ra %v", r.Id, m.Id, r.Response, r.RecursionAvailable)
	}
	return r
}

// answerAddrs lists the A/AAAA addresses of a reply.
func answerAddrs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		default:
			out = append(out, "unexpected "+rr.String())
		}
	}
	return out
}

// recorder is a dns.ResponseWriter that packs what it is given, as the real
// one does, and keeps it.
type recorder struct {
	local, remote net.Addr
	msg           *dns.Msg
	packed        []byte
	writes        int
}

func newRecorder(network string) *recorder {
	r := &recorder{}
	if network == "tcp" {
		r.local = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
		r.remote = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	} else {
		r.local = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
		r.remote = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	}
	return r
}

func (r *recorder) LocalAddr() net.Addr  { return r.local }
func (r *recorder) RemoteAddr() net.Addr { return r.remote }
func (r *recorder) WriteMsg(m *dns.Msg) error {
	r.writes++
	r.msg = m
	b, err := m.PackBuffer(r.packed[:0])
	r.packed = b
	return err
}
func (r *recorder) Write(b []byte) (int, error) { r.writes++; return len(b), nil }
func (r *recorder) Close() error                { return nil }
func (r *recorder) TsigStatus() error           { return nil }
func (r *recorder) TsigTimersOnly(bool)         {}
func (r *recorder) Hijack()                     {}
