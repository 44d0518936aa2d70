package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
	"github.com/miekg/dns"
	"github.com/rs/zerolog"
)

var testDomains = []string{
	"allowed.test", "*.example.com", "loop.test", "meta.test", "mixed.test",
	"v4only.test", "mapped.test", "localhost", "127.0.0.1", "hang.test",
}

func seed(r *fakeResolver) {
	r.set("allowed.test.", "203.0.113.10", "2001:db8::10")
	r.set("www.example.com.", "198.51.100.7")
	r.set("loop.test.", "127.0.0.1")
	r.set("meta.test.", "169.254.169.254")
	r.set("mixed.test.", "203.0.113.5", "10.1.2.3")
	r.set("v4only.test.", "203.0.113.20")
	r.set("mapped.test.", "::ffff:10.0.0.1")
	r.mu.Lock()
	r.hang["hang.test."] = true
	r.mu.Unlock()
}

func TestAnswers(t *testing.T) {
	e := startEnv(t, Options{Timeout: 200 * time.Millisecond}, testDomains...)
	seed(e.res)

	tests := []struct {
		name    string
		qname   string
		qtype   uint16
		rcode   int
		addrs   []string
		reason  string   // prefix of Decision.Reason
		lookups []string // upstream lookups this query adds
	}{
		{"allowed A", "allowed.test.", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.10"}, ReasonAllowed, []string{"ip4 allowed.test."}},
		{"allowed AAAA", "allowed.test.", dns.TypeAAAA, dns.RcodeSuccess, []string{"2001:db8::10"}, ReasonAllowed, []string{"ip6 allowed.test."}},
		{"wildcard, mixed case", "WWW.Example.COM.", dns.TypeA, dns.RcodeSuccess, []string{"198.51.100.7"}, ReasonAllowed, []string{"ip4 www.example.com."}},
		{"denied name", "secret-data.attacker.example.", dns.TypeA, dns.RcodeRefused, nil, ReasonAllowlist, nil},
		{"wildcard apex is not allowed", "example.com.", dns.TypeA, dns.RcodeRefused, nil, ReasonAllowlist, nil},
		{"denied name, HTTPS", "secret-data.attacker.example.", dns.TypeHTTPS, dns.RcodeRefused, nil, ReasonAllowlist, nil},
		{"denied name, TXT", "c2VjcmV0.attacker.example.", dns.TypeTXT, dns.RcodeRefused, nil, ReasonAllowlist, nil},
		{"resolves to loopback", "loop.test.", dns.TypeA, dns.RcodeRefused, nil, ReasonAddressPolicy + ": address 127.0.0.1 is loopback", []string{"ip4 loop.test."}},
		{"resolves to metadata", "meta.test.", dns.TypeA, dns.RcodeRefused, nil, ReasonAddressPolicy + ": address 169.254.169.254 is cloud metadata", []string{"ip4 meta.test."}},
		{"public and private", "mixed.test.", dns.TypeA, dns.RcodeRefused, nil, ReasonAddressPolicy + ": address 10.1.2.3 is private", []string{"ip4 mixed.test."}},
		{"mapped IPv4 in AAAA is never answered", "mapped.test.", dns.TypeAAAA, dns.RcodeSuccess, nil, ReasonNoData, []string{"ip6 mapped.test."}},
		{"localhost, though allowlisted", "localhost.", dns.TypeA, dns.RcodeRefused, nil, ReasonLocalhost, nil},
		{"below localhost", "a.localhost.", dns.TypeA, dns.RcodeRefused, nil, ReasonLocalhost, nil},
		{"IP literal, though allowlisted", "127.0.0.1.", dns.TypeA, dns.RcodeRefused, nil, ReasonIPLiteral, nil},
		{"hex IP literal", "0x7f.1.", dns.TypeA, dns.RcodeRefused, nil, ReasonIPLiteral, nil},
		{"escaped bytes in name", `allowed\.test.`, dns.TypeA, dns.RcodeRefused, nil, ReasonBadName, nil},
		{"MX", "allowed.test.", dns.TypeMX, dns.RcodeRefused, nil, ReasonType, nil},
		{"TXT", "allowed.test.", dns.TypeTXT, dns.RcodeRefused, nil, ReasonType, nil},
		{"PTR", "allowed.test.", dns.TypePTR, dns.RcodeRefused, nil, ReasonType, nil},
		{"ANY", "allowed.test.", dns.TypeANY, dns.RcodeRefused, nil, ReasonType, nil},
		{"NS", "allowed.test.", dns.TypeNS, dns.RcodeRefused, nil, ReasonType, nil},
		{"HTTPS is empty", "allowed.test.", dns.TypeHTTPS, dns.RcodeSuccess, nil, ReasonTypeNoData, nil},
		{"SVCB is empty", "allowed.test.", dns.TypeSVCB, dns.RcodeSuccess, nil, ReasonTypeNoData, nil},
		{"AAAA of an IPv4-only name is NODATA", "v4only.test.", dns.TypeAAAA, dns.RcodeSuccess, nil, ReasonNoData, []string{"ip6 v4only.test.", "ip4 v4only.test."}},
		{"then its A is cached", "v4only.test.", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.20"}, ReasonAllowed, nil},
		{"missing name", "missing.example.com.", dns.TypeA, dns.RcodeNameError, nil, ReasonNoSuchName, []string{"ip4 missing.example.com.", "ip6 missing.example.com."}},
		{"upstream timeout", "hang.test.", dns.TypeA, dns.RcodeServerFailure, nil, ReasonTimeout, []string{"ip4 hang.test."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.res.Calls())
			r := e.query(t, "udp", tt.qname, tt.qtype)
			d := <-e.decisions
			if r.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s (reason %q)", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode], d.Reason)
			}
			if got := answerAddrs(r); !slices.Equal(got, tt.addrs) {
				t.Errorf("answer %v, want %v", got, tt.addrs)
			}
			if !strings.HasPrefix(d.Reason, tt.reason) {
				t.Errorf("reason %q, want %q", d.Reason, tt.reason)
			}
			if got := e.res.Calls()[before:]; !slices.Equal(got, tt.lookups) {
				t.Errorf("upstream lookups %q, want %q", got, tt.lookups)
			}
			for _, rr := range r.Answer {
				if rr.Header().Name != tt.qname || rr.Header().Ttl == 0 || rr.Header().Ttl > 30 {
					t.Errorf("answer header %v: want name %q and TTL in 1..30", rr.Header(), tt.qname)
				}
			}
		})
	}
}

func TestDecisionLogLine(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	seed(e.res)
	e.query(t, "udp", "mixed.test.", dns.TypeA)
	<-e.decisions
	lines := e.log.Lines(t)
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1: %v", len(lines), lines)
	}
	l := lines[0]
	want := map[string]any{
		"message": "dns", "level": "info", "name": "mixed.test", "type": "A", "verdict": "refused",
		"reason": "blocked-by-address-policy: address 10.1.2.3 is private", "cached": false,
		"addrs": []any{"203.0.113.5", "10.1.2.3"},
	}
	for k, v := range want {
		if fmt.Sprint(l[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v", k, l[k], v)
		}
	}
	if c, _ := l["client"].(string); !strings.HasPrefix(c, "127.0.0.1:") {
		t.Errorf("client = %v", l["client"])
	}
	if _, ok := l["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms = %v", l["duration_ms"])
	}
}

func TestCacheHitDoesNoLookup(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	seed(e.res)
	for i, wantCached := range []bool{false, true, true} {
		r := e.query(t, "udp", "allowed.test.", dns.TypeA)
		d := <-e.decisions
		if got := answerAddrs(r); !slices.Equal(got, []string{"203.0.113.10"}) || d.Cached != wantCached {
			t.Errorf("query %d: answer %v cached %v, want [203.0.113.10] cached %v", i, got, d.Cached, wantCached)
		}
	}
	if n := len(e.res.Calls()); n != 1 {
		t.Errorf("%d upstream lookups, want 1", n)
	}
}

// A reload that removes a name applies to cached entries at once; one that
// reopens a range applies to cached refusals.
func TestCacheFollowsPolicySwap(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	seed(e.res)
	old := e.pol.Load()

	if r := e.query(t, "udp", "allowed.test.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("rcode %d", r.Rcode)
	}
	<-e.decisions
	e.pol.Store(mustPolicy(t, "other.test"))
	r := e.query(t, "udp", "allowed.test.", dns.TypeA)
	d := <-e.decisions
	if r.Rcode != dns.RcodeRefused || d.Reason != ReasonAllowlist {
		t.Errorf("after the name was removed: rcode %s reason %q, want REFUSED %s", dns.RcodeToString[r.Rcode], d.Reason, ReasonAllowlist)
	}

	// Back to the old allowlist: a cached refusal by address policy stays
	// refused without asking upstream, until a reload reopens 10/8.
	e.pol.Store(old)
	for range 2 {
		if r := e.query(t, "udp", "mixed.test.", dns.TypeA); r.Rcode != dns.RcodeRefused {
			t.Errorf("mixed.test: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
		}
		<-e.decisions
	}
	ap, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	e.pol.Store(&config.Policy{Allowlist: old.Allowlist, Addrs: ap})
	r = e.query(t, "udp", "mixed.test.", dns.TypeA)
	d = <-e.decisions
	if got := answerAddrs(r); !slices.Equal(got, []string{"203.0.113.5", "10.1.2.3"}) || !d.Cached {
		t.Errorf("after reopening 10/8: answer %v cached %v, want both addresses from the cache", got, d.Cached)
	}
	if got := e.res.Calls(); !slices.Equal(got, []string{"ip4 allowed.test.", "ip4 mixed.test."}) {
		t.Errorf("upstream lookups %q, want one per name", got)
	}
}

func TestTCPAndTruncation(t *testing.T) {
	e := startEnv(t, Options{}, "many.test", "allowed.test")
	seed(e.res)
	var many []string
	for i := range 60 {
		many = append(many, fmt.Sprintf("203.0.113.%d", i+1))
	}
	e.res.set("many.test.", many...)

	r := e.query(t, "tcp", "allowed.test.", dns.TypeA)
	if got := answerAddrs(r); !slices.Equal(got, []string{"203.0.113.10"}) {
		t.Errorf("TCP answer %v", got)
	}

	r = e.query(t, "udp", "many.test.", dns.TypeA)
	if !r.Truncated || len(r.Answer) >= 60 {
		t.Errorf("UDP without EDNS: TC %v with %d answers, want TC and fewer than 60", r.Truncated, len(r.Answer))
	}
	r.Compress = true
	if n := r.Len(); n > dns.MinMsgSize {
		t.Errorf("UDP answer of %d bytes", n)
	}

	m := new(dns.Msg)
	m.SetQuestion("many.test.", dns.TypeA)
	m.SetEdns0(4096, false)
	r = e.exchange(t, "udp", m)
	if r.Truncated || len(r.Answer) != 60 || r.IsEdns0() == nil {
		t.Errorf("UDP with EDNS 4096: TC %v, %d answers, OPT %v; want all 60 and an OPT", r.Truncated, len(r.Answer), r.IsEdns0())
	}

	r = e.query(t, "tcp", "many.test.", dns.TypeA)
	if r.Truncated || len(r.Answer) != 60 {
		t.Errorf("TCP: TC %v, %d answers; want all 60", r.Truncated, len(r.Answer))
	}
	if n := len(e.res.Calls()); n != 2 {
		t.Errorf("%d upstream lookups, want 2", n)
	}
}

func TestUpstreamTimeoutIsNotCached(t *testing.T) {
	e := startEnv(t, Options{Timeout: 50 * time.Millisecond}, testDomains...)
	seed(e.res)
	for range 2 {
		r := e.query(t, "udp", "hang.test.", dns.TypeA)
		d := <-e.decisions
		if r.Rcode != dns.RcodeServerFailure || d.Reason != ReasonTimeout || d.Verdict != VerdictServFail {
			t.Errorf("rcode %s verdict %s reason %q", dns.RcodeToString[r.Rcode], d.Verdict, d.Reason)
		}
	}
	if n := len(e.res.Calls()); n != 2 {
		t.Errorf("%d upstream lookups, want 2 (failures are not cached)", n)
	}
}

func TestUpstreamError(t *testing.T) {
	s := New(Options{
		Policy:   func() *config.Policy { return mustPolicy(t, "allowed.test") },
		Resolver: errResolver{errors.New("connection refused")},
	})
	defer s.Shutdown(context.Background())
	w := newRecorder("udp")
	m := new(dns.Msg)
	m.SetQuestion("allowed.test.", dns.TypeA)
	var d Decision
	s.onDecision = func(x Decision) { d = x }
	s.ServeDNS(w, m)
	if w.msg.Rcode != dns.RcodeServerFailure || d.Reason != ReasonUpstream {
		t.Errorf("rcode %d reason %q", w.msg.Rcode, d.Reason)
	}
}

type errResolver struct{ err error }

func (r errResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, r.err
}

// Concurrent misses for one name share one upstream lookup.
func TestConcurrentMissesShareALookup(t *testing.T) {
	e := startEnv(t, Options{}, testDomains...)
	seed(e.res)
	e.res.mu.Lock()
	e.res.delay = 100 * time.Millisecond
	e.res.mu.Unlock()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			m := new(dns.Msg)
			m.SetQuestion("allowed.test.", dns.TypeA)
			r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, e.udp)
			if err != nil || len(r.Answer) != 1 {
				t.Errorf("exchange: %v %v", r, err)
			}
		})
	}
	wg.Wait()
	if n := len(e.res.Calls()); n != 1 {
		t.Errorf("%d upstream lookups, want 1", n)
	}
}

// Shutdown ends a lookup in flight, and the handler waiting on it.
func TestShutdownDuringLookup(t *testing.T) {
	res := newFakeResolver()
	res.hang["hang.test."] = true
	s := New(Options{Policy: func() *config.Policy { return mustPolicy(t, "hang.test") }, Resolver: res, Timeout: time.Minute})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeUDP(pc) }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion("hang.test.", dns.TypeA)
	b, _ := m.Pack()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	select {
	case <-res.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the query never reached the resolver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("ServeUDP: %v", err)
	}
	pc2, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ServeUDP(pc2); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ServeUDP after Shutdown: %v, want net.ErrClosed", err)
	}
}

// Shutdown right after Serve was called, before it started, must not leave
// it running.
func TestShutdownRacesServe(t *testing.T) {
	for range 20 {
		s := New(Options{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.ServeTCP(ln) }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("ServeTCP still running after Shutdown")
		}
	}
}

// What miekg/dns hands the handler only when called directly.
func TestServeDNSDirect(t *testing.T) {
	res := newFakeResolver()
	seed(res)
	var decisions []Decision
	s := New(Options{
		Policy:     func() *config.Policy { return mustPolicy(t, testDomains...) },
		Resolver:   res,
		Logger:     zerolog.Nop(),
		OnDecision: func(d Decision) { decisions = append(decisions, d) },
	})
	defer s.Shutdown(context.Background())

	q := func() *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion("allowed.test.", dns.TypeA)
		return m
	}
	tests := []struct {
		name    string
		msg     func() *dns.Msg
		rcode   int
		verdict string
	}{
		{"two questions", func() *dns.Msg {
			m := q()
			m.Question = append(m.Question, m.Question[0])
			return m
		}, dns.RcodeFormatError, VerdictFormErr},
		{"no question", func() *dns.Msg { m := q(); m.Question = nil; return m }, dns.RcodeFormatError, VerdictFormErr},
		{"NOTIFY", func() *dns.Msg { m := q(); m.Opcode = dns.OpcodeNotify; return m }, dns.RcodeNotImplemented, VerdictNotImp},
		{"class CH", func() *dns.Msg { m := q(); m.Question[0].Qclass = dns.ClassCHAOS; return m }, dns.RcodeRefused, VerdictRefused},
		{"EDNS version 1", func() *dns.Msg {
			m := q()
			m.SetEdns0(1232, false)
			m.IsEdns0().SetVersion(1)
			return m
		}, dns.RcodeBadVers, VerdictFormErr},
		{"root", func() *dns.Msg { m := q(); m.Question[0].Name = "."; return m }, dns.RcodeRefused, VerdictRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRecorder("udp")
			req := tt.msg()
			s.ServeDNS(w, req)
			if w.writes != 1 {
				t.Fatalf("%d writes", w.writes)
			}
			back := new(dns.Msg)
			if err := back.Unpack(w.packed); err != nil {
				t.Fatalf("unpack answer: %v", err)
			}
			if back.Rcode != tt.rcode || back.Id != req.Id || len(back.Answer) != 0 {
				t.Errorf("rcode %s id %d answers %d, want %s id %d none", dns.RcodeToString[back.Rcode], back.Id, len(back.Answer), dns.RcodeToString[tt.rcode], req.Id)
			}
			if d := decisions[len(decisions)-1]; d.Verdict != tt.verdict {
				t.Errorf("verdict %s, want %s", d.Verdict, tt.verdict)
			}
		})
	}
	t.Run("a response gets no reply", func(t *testing.T) {
		w := newRecorder("udp")
		m := q()
		m.Response = true
		s.ServeDNS(w, m)
		if w.writes != 0 {
			t.Errorf("%d writes", w.writes)
		}
	})
	if len(res.Calls()) != 0 {
		t.Errorf("upstream lookups %q, want none", res.Calls())
	}
}

func TestCacheLRU(t *testing.T) {
	c := newCache(2)
	now := time.Now()
	later := now.Add(time.Minute)
	r := &result{}
	c.put(cacheKey{"a", 1}, r, later)
	c.put(cacheKey{"b", 1}, r, later)
	if _, _, ok := c.get(cacheKey{"a", 1}, now); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.put(cacheKey{"c", 1}, r, later) // evicts b
	if _, _, ok := c.get(cacheKey{"b", 1}, now); ok {
		t.Error("b not evicted")
	}
	for _, k := range []string{"a", "c"} {
		if _, _, ok := c.get(cacheKey{k, 1}, now); !ok {
			t.Errorf("%s evicted", k)
		}
	}
	if _, _, ok := c.get(cacheKey{"a", 1}, later); ok {
		t.Error("expired entry returned")
	}
	if n := c.len(); n != 1 {
		t.Errorf("len %d after expiry, want 1", n)
	}
}

// TestPinnedEntry: an entry's addresses bind the DNS server's answers as
// they bind the proxy's dials (one judging function): an answer outside
// them is refused, one inside is answered.
func TestPinnedEntry(t *testing.T) {
	e := startEnv(t, Options{}, "pinned.test", "inside.test", "free.test")
	pins := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	p := *e.pol.Load()
	p.Entries = []config.Entry{{Addresses: pins}, {Addresses: pins}}
	e.pol.Store(&p)
	e.res.set("pinned.test.", "198.51.100.9")
	e.res.set("inside.test.", "203.0.113.4")
	e.res.set("free.test.", "198.51.100.9")

	r := e.query(t, "udp", "pinned.test.", dns.TypeA)
	d := <-e.decisions
	if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 || d.Reason != ReasonAddressPolicy+": address 198.51.100.9 is outside the addresses the allowlist entry allows" {
		t.Errorf("outside its pins: rcode %s, answer %v, reason %q; want REFUSED for the pin", dns.RcodeToString[r.Rcode], answerAddrs(r), d.Reason)
	}
	r = e.query(t, "udp", "free.test.", dns.TypeA)
	if d := <-e.decisions; r.Rcode != dns.RcodeSuccess || !slices.Equal(answerAddrs(r), []string{"198.51.100.9"}) {
		t.Errorf("an entry without pins: rcode %s, answer %v (%q)", dns.RcodeToString[r.Rcode], answerAddrs(r), d.Reason)
	}

	r = e.query(t, "udp", "inside.test.", dns.TypeA)
	if d := <-e.decisions; r.Rcode != dns.RcodeSuccess || !slices.Equal(answerAddrs(r), []string{"203.0.113.4"}) {
		t.Errorf("inside its pins: rcode %s, answer %v (%q)", dns.RcodeToString[r.Rcode], answerAddrs(r), d.Reason)
	}
}

// A decision carries the TTL its answer carried (what the gateway's DNS
// memory keeps a name for); one without records carries none.
func TestDecisionTTL(t *testing.T) {
	e := startEnv(t, Options{TTL: 40 * time.Second}, testDomains...)
	seed(e.res)
	r := e.query(t, "udp", "allowed.test.", dns.TypeA)
	d := <-e.decisions
	if len(r.Answer) != 1 || d.TTL != time.Duration(r.Answer[0].Header().Ttl)*time.Second || d.TTL <= 0 || d.TTL > 40*time.Second {
		t.Fatalf("answer %v, decision TTL %v", r.Answer, d.TTL)
	}
	e.query(t, "udp", "denied.test.", dns.TypeA)
	if d := <-e.decisions; d.TTL != 0 {
		t.Fatalf("refused answer: decision TTL %v", d.TTL)
	}
}

// BeforeAnswer runs before the answer is written, with the name, the
// addresses and the TTL the answer carries: what it records is in place
// when the client can act on the answer.
func TestBeforeAnswerPrecedesTheAnswer(t *testing.T) {
	res := newFakeResolver()
	seed(res)
	w := newRecorder("udp")
	var before []Decision
	s := New(Options{
		Policy:   func() *config.Policy { return mustPolicy(t, testDomains...) },
		Resolver: res,
		Logger:   zerolog.Nop(),
		BeforeAnswer: func(d Decision) {
			if w.writes != 0 {
				t.Errorf("BeforeAnswer ran after %d writes of the answer", w.writes)
			}
			before = append(before, d)
		},
	})
	defer s.Shutdown(context.Background())

	m := new(dns.Msg)
	m.SetQuestion("allowed.test.", dns.TypeA)
	s.ServeDNS(w, m)
	if w.writes != 1 || w.msg == nil || len(w.msg.Answer) == 0 {
		t.Fatalf("answer: %d writes, %v", w.writes, w.msg)
	}
	if len(before) != 1 {
		t.Fatalf("BeforeAnswer calls = %d, want 1", len(before))
	}
	d := before[0]
	if d.Verdict != VerdictAnswer || d.Name != "allowed.test" || len(d.Addrs) != len(w.msg.Answer) || d.TTL <= 0 {
		t.Errorf("BeforeAnswer got %+v; the answer has %d records", d, len(w.msg.Answer))
	}
}
