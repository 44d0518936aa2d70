package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/resolve"
	"github.com/miekg/dns"
	"github.com/rs/zerolog"
)

var (
	_ resolve.Resolver = (*net.Resolver)(nil)
	_ dns.Handler      = (*Server)(nil)
)

// Options configures a Server.
type Options struct {
	// Policy returns the current policy (the gateway's one generation,
	// which the proxy reads too); it is called once per query and must be
	// safe for concurrent use (an atomic.Pointer's Load). If nil, or if it
	// returns nil, every name is refused. Its Sinkhole, if not empty,
	// changes how a denied name is answered: A and AAAA get the sinkhole
	// address of their family (NODATA when there is none), HTTPS and SVCB
	// get NODATA, instead of REFUSED. The addresses must lead to the
	// gateway's transparent listener, which judges the connection by its
	// SNI or Host like any other and answers the readable 403; see the
	// package documentation.
	Policy func() *config.Policy
	// Resolver does the upstream lookups. If nil, net.DefaultResolver.
	Resolver resolve.Resolver
	// Logger receives one decision line per answer. The zero Logger
	// writes nothing.
	Logger zerolog.Logger
	// TTL is the TTL of fresh answers and how long an upstream result is
	// cached; a cached answer carries the time it has left. If zero, 30s.
	TTL time.Duration
	// CacheSize bounds the cache, in entries (one per name and type). If
	// zero, 4096. The least recently used entry is evicted first.
	CacheSize int
	// Timeout bounds one upstream lookup. If zero, 5s.
	Timeout time.Duration
	// BeforeAnswer, if set, is called with every decision before its
	// answer is written (Duration is not set yet), on the query's
	// goroutine: what it records is in place by the time the client can
	// act on the answer. It must not modify Addrs.
	BeforeAnswer func(Decision)
	// OnDecision, if set, is called with every decision, after the answer
	// is written, on the query's goroutine. It must not modify Addrs.
	OnDecision func(Decision)
}

// Defaults for the zero Options fields, and fixed limits.
const (
	DefaultTTL       = 30 * time.Second
	DefaultCacheSize = 4096
	DefaultTimeout   = 5 * time.Second

	// maxUpstream bounds concurrent upstream lookups, so that a flood of
	// distinct allowed names (under "*.x.com") cannot open unbounded
	// sockets on the gateway host. A lookup that waits longer than
	// Timeout for a slot is SERVFAIL.
	maxUpstream = 256
	// maxAddrs bounds the addresses kept (and so judged and answered) per
	// name and type; what upstream returned beyond them is dropped before
	// the check, so the sandbox only ever receives addresses that passed.
	maxAddrs = 64
	// ednsSize is the UDP payload size we advertise and the largest UDP
	// answer we send (DNS flag day 2020: no IP fragmentation).
	ednsSize = 1232
	// udpReadSize is the read buffer for UDP queries; EDNS padding can make
	// a query larger than the default 512 bytes.
	udpReadSize = 4096
	// sinkholeTTL is short, so that a reload that allows the name hands
	// out its real addresses soon (the sinkhole address would work for it
	// too: the transparent listener dials the name, never the address).
	sinkholeTTL = 5
)

// Verdicts of a Decision.
const (
	VerdictAnswer   = "answer" // NOERROR, with addresses or none (NODATA)
	VerdictRefused  = "refused"
	VerdictNXDomain = "nxdomain"
	VerdictServFail = "servfail"
	VerdictFormErr  = "formerr"
	VerdictNotImp   = "notimp"
	// VerdictSinkhole: a denied name answered with Policy.Sinkhole; the
	// reason says why it was denied.
	VerdictSinkhole = "sinkhole"
)

// Reasons of a Decision. A refusal by address policy is
// ReasonAddressPolicy + ": address 10.0.0.1 is private"; a bad name is
// ReasonBadName + ": " and NormalizeHost's explanation.
const (
	ReasonAllowed = "allowed"
	// ReasonWouldDeny: a name the allowlist denies, answered all the same
	// (its addresses judged like any other's) because the policy is in
	// report mode (config.Policy.Report), so that the proxy sees the
	// connection and logs it as would-deny.
	ReasonWouldDeny     = "would-deny"
	ReasonNoData        = "no-address-of-this-family"
	ReasonNoSuchName    = "no-such-name"
	ReasonTypeNoData    = "type-answered-empty" // HTTPS, SVCB
	ReasonAllowlist     = "blocked-by-allowlist"
	ReasonAddressPolicy = "blocked-by-address-policy"
	ReasonLocalhost     = "blocked-by-address-policy: localhost is loopback"
	ReasonIPLiteral     = "ip-literal-name"
	ReasonBadName       = "bad-name"
	ReasonType          = "type-not-served"
	ReasonClass         = "class-not-served"
	ReasonOpcode        = "opcode-not-served"
	ReasonQuestions     = "not-one-question"
	ReasonEDNSVersion   = "bad-edns-version"
	ReasonTimeout       = "upstream-timeout"
	ReasonUpstream      = "upstream-error"
)

// Log field names of the decision line.
const (
	fieldClient   = "client"
	fieldTenant   = "tenant"
	fieldName     = "name"
	fieldType     = "type"
	fieldVerdict  = "verdict"
	fieldReason   = "reason"
	fieldCached   = "cached"
	fieldAddrs    = "addrs"
	fieldDuration = "duration_ms"
	logMessage    = "dns"
)

// Decision is the outcome of one query.
type Decision struct {
	// Client is the querier's address ("" when unknown).
	Client string
	// Tenant is the tenant whose client range holds Client; "" for none.
	Tenant string
	// Name is the normalised name, or the name as asked when it could not
	// be normalised.
	Name string
	// Type is the query type: "A", "AAAA", "MX", "TYPE65280", ...
	Type    string
	Verdict string
	Reason  string
	// Cached is true when no upstream lookup was needed because the cache
	// held the answer.
	Cached bool
	// Addrs are the addresses answered, or, when refused by address
	// policy, the addresses upstream returned. Shared with the cache:
	// read-only.
	Addrs []netip.Addr
	// TTL is the TTL the answer carried (zero when it carried no
	// records).
	TTL      time.Duration
	Duration time.Duration
}

// Server answers the sandbox's DNS queries. Create it with New; it is safe
// for concurrent use.
type Server struct {
	policy   func() *config.Policy
	resolver resolve.Resolver
	log      zerolog.Logger
	ttl      time.Duration
	timeout  time.Duration
	// beforeAnswer and onDecision: Options.BeforeAnswer and OnDecision.
	beforeAnswer func(Decision)
	onDecision   func(Decision)

	cache *cache
	sem   chan struct{}

	// base is cancelled by Shutdown so that upstream lookups in flight end
	// and the handlers waiting on them return.
	base   context.Context
	cancel context.CancelFunc

	fmu     sync.Mutex
	flights map[cacheKey]*flight

	mu      sync.Mutex
	closed  bool
	running []*running
}

// running is one ServeUDP or ServeTCP call.
type running struct {
	srv     *dns.Server
	started chan struct{} // closed when miekg/dns has started serving
	done    chan struct{} // closed when the Serve call returns
}

// New returns a Server; it serves nothing until ServeUDP or ServeTCP.
func New(o Options) *Server {
	s := &Server{
		policy:       o.Policy,
		resolver:     o.Resolver,
		log:          o.Logger,
		ttl:          o.TTL,
		timeout:      o.Timeout,
		onDecision:   o.OnDecision,
		beforeAnswer: o.BeforeAnswer,
		sem:          make(chan struct{}, maxUpstream),
		flights:      make(map[cacheKey]*flight),
	}
	if s.policy == nil {
		s.policy = func() *config.Policy { return nil }
	}
	if s.resolver == nil {
		s.resolver = net.DefaultResolver
	}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	size := o.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	s.cache = newCache(size)
	s.base, s.cancel = context.WithCancel(context.Background())
	return s
}

// ServeUDP answers queries on pc until Shutdown, then returns nil; it closes
// pc. After Shutdown it returns an error wrapping net.ErrClosed at once.
func (s *Server) ServeUDP(pc net.PacketConn) error {
	return s.serve(&dns.Server{PacketConn: pc, Net: "udp", UDPSize: udpReadSize}, pc)
}

// ServeTCP answers queries on ln until Shutdown, then returns nil; it closes
// ln. After Shutdown it returns an error wrapping net.ErrClosed at once.
func (s *Server) ServeTCP(ln net.Listener) error {
	return s.serve(&dns.Server{Listener: ln, Net: "tcp"}, ln)
}

func (s *Server) serve(srv *dns.Server, c io.Closer) error {
	r := &running{srv: srv, started: make(chan struct{}), done: make(chan struct{})}
	srv.Handler = s
	srv.NotifyStartedFunc = func() { close(r.started) }
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return fmt.Errorf("dnsserver: %w", net.ErrClosed)
	}
	s.running = append(s.running, r)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = slices.DeleteFunc(s.running, func(x *running) bool { return x == r })
		s.mu.Unlock()
		close(r.done)
	}()
	if err := srv.ActivateAndServe(); err != nil {
		return fmt.Errorf("dnsserver: %w", err)
	}
	return nil
}

// Shutdown stops every ServeUDP and ServeTCP, cancels upstream lookups in
// flight, and waits until the handlers have returned and the Serve calls
// with them, or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	rs := slices.Clone(s.running)
	s.mu.Unlock()
	s.cancel()

	var errs []error
	for _, r := range rs {
		// miekg/dns refuses to shut down a server that has not started
		// yet, so wait for it to start (or to have failed) first;
		// otherwise a Serve racing with Shutdown would run forever.
		select {
		case <-r.started:
			if err := r.srv.ShutdownContext(ctx); err != nil {
				errs = append(errs, err)
			}
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// ServeDNS answers one query. It is the dns.Handler the servers use,
// exported for tests and benchmarks.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	if r == nil || r.Response {
		return // never answer an answer: no reflection loops
	}
	d := Decision{Client: client(w)}
	rcode, ttl := s.decide(r, &d)

	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	m.Rcode = rcode
	if (d.Verdict == VerdictAnswer || d.Verdict == VerdictSinkhole) && len(d.Addrs) > 0 {
		name := r.Question[0].Name // echo the asker's spelling (0x20 randomisation)
		m.Answer = make([]dns.RR, 0, len(d.Addrs))
		d.TTL = time.Duration(ttl) * time.Second
		for _, a := range d.Addrs {
			hdr := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: ttl}
			if a.Is4() {
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			} else {
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	udpSize := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		udpSize = min(max(int(opt.UDPSize()), dns.MinMsgSize), ednsSize)
		m.SetEdns0(ednsSize, false)
	}
	if isStream(w) {
		m.Compress = true
	} else {
		// Truncate compresses, drops what does not fit and sets TC, so
		// the client retries over TCP.
		m.Truncate(udpSize)
	}
	if s.beforeAnswer != nil {
		s.beforeAnswer(d)
	}
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug().Err(err).Str(fieldName, d.Name).Msg("dns: writing the answer")
	}

	d.Duration = time.Since(start)
	if e := s.log.Info(); e.Enabled() {
		if d.Tenant != "" {
			e = e.Str(fieldTenant, d.Tenant)
		}
		e.Str(fieldClient, d.Client).
			Str(fieldName, d.Name).
			Str(fieldType, d.Type).
			Str(fieldVerdict, d.Verdict).
			Str(fieldReason, d.Reason).
			Bool(fieldCached, d.Cached).
			Array(fieldAddrs, addrList(d.Addrs)).
			Float64(fieldDuration, float64(d.Duration)/float64(time.Millisecond)).
			Msg(logMessage)
	}
	if s.onDecision != nil {
		if d.Client == "" {
			d.Client = client(w)
		}
		s.onDecision(d)
	}
}

// decide fills d and returns the rcode and, for answers, their TTL.
func (s *Server) decide(r *dns.Msg, d *Decision) (rcode int, ttl uint32) {
	if len(r.Question) > 0 {
		q := r.Question[0]
		d.Name, d.Type = q.Name, typeString(q.Qtype)
	}
	switch {
	case r.Opcode != dns.OpcodeQuery:
		return fail(d, VerdictNotImp, ReasonOpcode, dns.RcodeNotImplemented)
	case len(r.Question) != 1:
		return fail(d, VerdictFormErr, ReasonQuestions, dns.RcodeFormatError)
	}
	if opt := r.IsEdns0(); opt != nil && opt.Version() != 0 {
		return fail(d, VerdictFormErr, ReasonEDNSVersion, dns.RcodeBadVers)
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET {
		return fail(d, VerdictRefused, ReasonClass, dns.RcodeRefused)
	}
	name, ip, err := allowlist.NormalizeHost(q.Name)
	switch {
	case err != nil:
		return fail(d, VerdictRefused, ReasonBadName+": "+err.Error(), dns.RcodeRefused)
	case ip.IsValid():
		d.Name = name
		return fail(d, VerdictRefused, ReasonIPLiteral, dns.RcodeRefused)
	}
	d.Name = name
	if allowlist.IsLocalhostName(name) {
		return fail(d, VerdictRefused, ReasonLocalhost, dns.RcodeRefused)
	}
	// A tenant's sandbox asks by its address: it gets its tenant's answers.
	p, tenant := s.policy().ForClient(clientIP(d.Client))
	d.Tenant = tenant
	v := p.Decide(name)
	answered := ReasonAllowed
	if !v.Allowed {
		if p == nil || !p.Report {
			return denied(d, p, q.Qtype, ReasonAllowlist)
		}
		// Report mode: answered as a name that matched no entry (no
		// pins); the address policy still judges every address.
		answered = ReasonWouldDeny
	}
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA:
	case dns.TypeHTTPS, dns.TypeSVCB:
		return fail(d, VerdictAnswer, ReasonTypeNoData, dns.RcodeSuccess)
	default:
		return fail(d, VerdictRefused, ReasonType, dns.RcodeRefused)
	}

	res, exp, cached, err := s.resolve(name, q.Qtype)
	d.Cached = cached
	if err != nil {
		return s.upstreamFailure(d, err)
	}
	if res.notFound {
		// Go's resolver says "no such host" for a name without addresses
		// of this family too; the other family tells the two apart.
		other := uint16(dns.TypeA)
		if q.Qtype == dns.TypeA {
			other = dns.TypeAAAA
		}
		ores, oexp, ocached, err := s.resolve(name, other)
		d.Cached = cached && ocached
		if err != nil {
			return s.upstreamFailure(d, err)
		}
		if ores.notFound {
			return fail(d, VerdictNXDomain, ReasonNoSuchName, dns.RcodeNameError)
		}
		if oexp.Before(exp) {
			exp = oexp
		}
		return succeed(d, ReasonNoData, exp)
	}
	d.Addrs = res.addrs
	// One refused address refuses the answer: handing out the others
	// would still tell the sandbox the name exists, but the refused one
	// must never reach it. The proxy judges the same way (the same
	// function) before it dials.
	if err := p.CheckAddrs(v.Entry, name, 0, res.addrs); err != nil {
		return denied(d, p, q.Qtype, addressReason(err))
	}
	if len(res.addrs) == 0 {
		return succeed(d, ReasonNoData, exp)
	}
	return succeed(d, answered, exp)
}

// denied answers a name the policy denies: REFUSED, or with the policy's
// sinkhole addresses when it has them. Only A, AAAA (the address of the
// family, or NODATA), HTTPS and SVCB (NODATA, so that clients go on to
// A/AAAA at once) are sinkholed; every other type stays REFUSED.
func denied(d *Decision, p *config.Policy, qtype uint16, reason string) (int, uint32) {
	if p == nil || len(p.Sinkhole) == 0 {
		return fail(d, VerdictRefused, reason, dns.RcodeRefused)
	}
	switch qtype {
	case dns.TypeA, dns.TypeAAAA:
		// A fresh slice for the addresses answered: d.Addrs may hold the
		// cache's (the ones the address policy refused).
		d.Addrs = nil
		for _, a := range p.Sinkhole {
			if a = a.Unmap(); a.Is4() == (qtype == dns.TypeA) {
				d.Addrs = append(d.Addrs, a)
			}
		}
	case dns.TypeHTTPS, dns.TypeSVCB:
		d.Addrs = nil
	default:
		return fail(d, VerdictRefused, reason, dns.RcodeRefused)
	}
	d.Verdict, d.Reason = VerdictSinkhole, reason
	return dns.RcodeSuccess, sinkholeTTL
}

// addressReason is the reason of an answer refused for one of its
// addresses (config.Policy.CheckAddrs's error): the address and its class,
// or that it is outside the entry's pinned ranges.
func addressReason(err error) string {
	var (
		blocked *allowlist.BlockedError
		pinned  *config.PinnedError
	)
	switch {
	case errors.As(err, &blocked):
		return fmt.Sprintf("%s: address %s is %s", ReasonAddressPolicy, blocked.Addr, blocked.Class)
	case errors.As(err, &pinned):
		return fmt.Sprintf("%s: address %s is outside the addresses the allowlist entry allows", ReasonAddressPolicy, pinned.Addr)
	}
	return ReasonAddressPolicy
}

func fail(d *Decision, verdict, reason string, rcode int) (int, uint32) {
	d.Verdict, d.Reason = verdict, reason
	return rcode, 0
}

func succeed(d *Decision, reason string, exp time.Time) (int, uint32) {
	d.Verdict, d.Reason = VerdictAnswer, reason
	// The time left, rounded up, at least 1s and at most 2^31-1 (RFC 2181).
	secs := (time.Until(exp) + time.Second - 1) / time.Second
	return dns.RcodeSuccess, uint32(min(max(secs, 1), 1<<31-1))
}

func (s *Server) upstreamFailure(d *Decision, err error) (int, uint32) {
	var de *net.DNSError
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) && de.IsTimeout {
		return fail(d, VerdictServFail, ReasonTimeout, dns.RcodeServerFailure)
	}
	return fail(d, VerdictServFail, ReasonUpstream, dns.RcodeServerFailure)
}

// resolve returns upstream's result for a key, from the cache when it can,
// and when it cannot, from one upstream lookup shared by every concurrent
// query for that key.
func (s *Server) resolve(name string, qtype uint16) (res *result, exp time.Time, cached bool, err error) {
	k := cacheKey{name, qtype}
	if res, exp, ok := s.cache.get(k, time.Now()); ok {
		return res, exp, true, nil
	}
	s.fmu.Lock()
	if f, ok := s.flights[k]; ok {
		s.fmu.Unlock()
		// The leader's lookup is bounded by Timeout; Shutdown ends it.
		select {
		case <-f.done:
			return f.res, f.exp, false, f.err
		case <-s.base.Done():
			return nil, time.Time{}, false, s.base.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	s.flights[k] = f
	s.fmu.Unlock()

	f.res, f.err = s.lookup(name, qtype)
	if f.err == nil {
		f.exp = time.Now().Add(s.ttl)
		s.cache.put(k, f.res, f.exp)
	}
	s.fmu.Lock()
	delete(s.flights, k)
	s.fmu.Unlock()
	close(f.done)
	return f.res, f.exp, false, f.err
}

// lookup asks upstream once.
func (s *Server) lookup(name string, qtype uint16) (*result, error) {
	ctx, cancel := context.WithTimeout(s.base, s.timeout)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	network := "ip4"
	if qtype == dns.TypeAAAA {
		network = "ip6"
	}
	// The rooted name: the gateway host's search domains must not turn an
	// allowed name into an internal one.
	addrs, err := s.resolver.LookupNetIP(ctx, network, name+".")
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return &result{notFound: true}, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("looking up %s: %w", name, ctx.Err())
		}
		return nil, fmt.Errorf("looking up %s: %w", name, err)
	}
	res := &result{addrs: make([]netip.Addr, 0, min(len(addrs), maxAddrs))}
	for _, a := range addrs {
		if len(res.addrs) == maxAddrs {
			break
		}
		// An answer of the other family (or an invalid one) from an odd
		// resolver is dropped, not answered under the wrong type.
		a = a.Unmap().WithZone("")
		if qtype == dns.TypeA && a.Is4() || qtype == dns.TypeAAAA && a.Is6() {
			res.addrs = append(res.addrs, a)
		}
	}
	return res, nil
}

func typeString(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return fmt.Sprintf("TYPE%d", t)
}

// isStream reports whether w is a stream (TCP) connection; anything else is
// treated as UDP and truncated to fit.
func isStream(w dns.ResponseWriter) bool {
	a := w.LocalAddr()
	if a == nil {
		return false
	}
	n := a.Network()
	return strings.HasPrefix(n, "tcp") || n == "unix"
}

// clientIP is the address of a "host:port" client; the zero Addr when it
// is not one.
func clientIP(hostPort string) netip.Addr {
	ap, err := netip.ParseAddrPort(hostPort)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

func client(w dns.ResponseWriter) string {
	if a := w.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// addrList logs addresses as a JSON array of strings.
type addrList []netip.Addr

func (l addrList) MarshalZerologArray(a *zerolog.Array) {
	for _, x := range l {
		a.Str(x.String())
	}
}
