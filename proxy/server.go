package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/internal/resolve"
)

// Timeouts bound every wait the gateway makes on a client or an upstream.
// A zero field takes the default named in its comment.
type Timeouts struct {
	Resolve        time.Duration // one DNS lookup; 5s
	Dial           time.Duration // one TCP connect; 10s
	TLSHandshake   time.Duration // one TLS handshake with an upstream; 10s
	ReadHeader     time.Duration // a client's request header; 10s
	ClientHello    time.Duration // a tunnel's TLS ClientHello after 200; 10s
	ResponseHeader time.Duration // an upstream's response header; 60s
	Idle           time.Duration // an idle keep-alive connection, either side; 90s
	TunnelIdle     time.Duration // a tunnel with no bytes either way; 10m
}

func (t Timeouts) withDefaults() Timeouts {
	t.Resolve = durationOr(t.Resolve, 5*time.Second)
	t.Dial = durationOr(t.Dial, 10*time.Second)
	t.TLSHandshake = durationOr(t.TLSHandshake, 10*time.Second)
	t.ReadHeader = durationOr(t.ReadHeader, 10*time.Second)
	t.ClientHello = durationOr(t.ClientHello, 10*time.Second)
	t.ResponseHeader = durationOr(t.ResponseHeader, 60*time.Second)
	t.Idle = durationOr(t.Idle, 90*time.Second)
	t.TunnelIdle = durationOr(t.TunnelIdle, 10*time.Minute)
	return t
}

// forPolicy returns t with the upstream timeouts that a policy sets
// replaced (a zero field keeps t's). The client-side ones (ReadHeader,
// ClientHello, Idle) belong to the listeners and are never a policy's.
func (t Timeouts) forPolicy(p config.Timeouts) Timeouts {
	t.Resolve = durationOr(p.Resolve, t.Resolve)
	t.Dial = durationOr(p.Dial, t.Dial)
	t.TLSHandshake = durationOr(p.TLSHandshake, t.TLSHandshake)
	t.ResponseHeader = durationOr(p.ResponseHeader, t.ResponseHeader)
	t.TunnelIdle = durationOr(p.TunnelIdle, t.TunnelIdle)
	return t
}

// timeoutsFor returns the timeouts of a request or tunnel judged by p to
// entry e (nil: before an entry is known): the entry's, then the
// policy's, then the server's.
func (s *Server) timeoutsFor(p *config.Policy, e *config.Entry) Timeouts {
	t := s.timeouts.forPolicy(p.Timeouts)
	if e != nil {
		t.ResponseHeader = durationOr(e.ResponseHeaderTimeout, t.ResponseHeader)
	}
	return t
}

// guardFor is the guard for connections judged by p to entry e (nil:
// before an entry is known), with timeouts t.
func (s *Server) guardFor(p *config.Policy, e *config.Entry, t Timeouts) Guard {
	g := *s.guard
	g.Policy, g.Entry = p, e
	g.ResolveTimeout, g.DialTimeout = t.Resolve, t.Dial
	return g
}

// Options configure a Server.
type Options struct {
	// Policy is the initial policy. It must not be nil.
	Policy *config.Policy
	// Resolver resolves upstream names. If nil, the system resolver.
	Resolver resolve.Resolver
	// UpstreamRoots verifies upstream TLS. If nil, the system roots.
	UpstreamRoots *x509.CertPool
	// Logger receives the decision lines and warnings.
	Logger zerolog.Logger
	// Timeouts; zero fields take their defaults.
	Timeouts Timeouts
	// MaxHeaderBytes caps a request header block. If zero, 64 KiB.
	MaxHeaderBytes int
	// DialControl, if set, is applied to every upstream socket (SO_MARK, so
	// that redirect rules in a shared namespace let the gateway's own
	// connections through).
	DialControl func(network, address string, c syscall.RawConn) error
	// Limits bound concurrent connections; zero fields are unlimited.
	Limits Limits
	// Observer, if set, hears of every decision, tunnel and limit.
	Observer Observer
	// Leaves mints the certificates shown to clients of intercepted (MITM)
	// tunnels. Required when the policy has transforms.
	Leaves *ca.LeafCache
	// Names, if set, is what the gateway's DNS server answered each
	// sandbox client (a *ResolvedNames). Transparent mode relays a
	// connection on one of an entry's raw_ports only to an address
	// answered for that entry's name; without Names it relays none.
	Names NameMemory
}

// Server is the explicit egress proxy. Create it with New, run it with Serve,
// stop it with Shutdown.
type Server struct {
	policy   atomic.Pointer[config.Policy]
	guard    *Guard
	log      zerolog.Logger
	sink     sink
	timeouts Timeouts
	maxHdr   int

	leaves    *ca.LeafCache
	roots     *x509.CertPool
	transport *http.Transport // for Options.Timeouts; see transports
	forwarder *goproxy.ProxyHttpServer
	http      *http.Server

	// transports holds the forwarding transports of other timeouts (a
	// policy's or an entry's).
	transports transportSet

	// tokens caches the OAuth2 tokens of the entries that fetch one.
	tokens tokenCache

	// hijacked tracks CONNECT connections, which http.Server.Shutdown does
	// not see once they are hijacked; Shutdown waits for them, then closes them.
	mu          sync.Mutex
	hijacked    map[*session]struct{}
	tunnels     sync.WaitGroup
	transparent []net.Listener // closed by Shutdown
	closing     bool

	limiter *connLimiter

	// authFailures rate-limits failed proxy authentications per client
	// address.
	authFailures authLimiter
	// tenantUse counts what each tenant uses, for tenants[].limits.
	tenantUse tenantLimiter

	// bufs lends copy buffers: to tunnels while bytes move, to the bodies
	// of forwarded responses, and to ReverseProxy in intercepted tunnels.
	bufs copyBuffers

	// parkAfter is how long a tunnel direction waits for bytes before it
	// parks (0: never); defaultParkAfter, shorter in tests.
	parkAfter time.Duration
	// parking holds the parker, made by the first park and closed by
	// Shutdown.
	parking struct {
		sync.Mutex
		p      *parker
		closed bool // by Shutdown, or it could not be made
	}

	// origDst recovers a redirected connection's destination; OriginalDst,
	// replaced in tests that cannot install redirect rules.
	origDst func(net.Conn) (netip.AddrPort, error)

	// names is Options.Names: nil when transparent raw tunnels are off.
	names NameMemory
}

var _ http.Handler = (*Server)(nil)

// New builds a Server; it listens on nothing until Serve.
func New(o Options) (*Server, error) {
	if err := validatePolicy(o.Policy, o.Leaves); err != nil {
		return nil, err
	}
	s := &Server{
		leaves:    o.Leaves,
		roots:     o.UpstreamRoots,
		log:       o.Logger,
		sink:      sink{log: o.Logger, observer: o.Observer},
		timeouts:  o.Timeouts.withDefaults(),
		maxHdr:    o.MaxHeaderBytes,
		hijacked:  make(map[*session]struct{}),
		parkAfter: defaultParkAfter,
		origDst:   OriginalDst,
		names:     o.Names,
		limiter:   &connLimiter{limits: o.Limits},
	}
	if s.maxHdr <= 0 {
		s.maxHdr = 64 << 10
	}
	s.policy.Store(o.Policy)
	s.sink.redact = &redactor{policy: s.policy.Load}
	s.guard = &Guard{
		Resolver:       o.Resolver,
		ResolveTimeout: s.timeouts.Resolve,
		DialTimeout:    s.timeouts.Dial,
		Control:        o.DialControl,
	}
	s.transport = &http.Transport{
		// Never from the environment: the gateway is the last hop.
		Proxy:                 nil,
		DialContext:           s.dialUpstream,
		TLSClientConfig:       &tls.Config{RootCAs: o.UpstreamRoots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   s.timeouts.TLSHandshake,
		ResponseHeaderTimeout: s.timeouts.ResponseHeader,
		IdleConnTimeout:       s.timeouts.Idle,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		// Pass the client's Accept-Encoding and the upstream's encoding through
		// untouched, instead of the transport negotiating gzip on its own.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}
	s.transports = transportSet{base: s.transport}
	s.forwarder = s.newForwarder()
	s.http = s.newHTTPServer(s)
	return s, nil
}

// newHTTPServer is net/http's server with our limits, for the explicit
// listener and for the connections we serve one by one (intercepted
// tunnels, transparent plain HTTP). Connections served must be watched
// (see watchConn), so that requests net/http ends itself are logged too.
// The request context carries the client connection, so that a
// framingConn keeps its own upstream connection (forwardUpstream) and its
// framing verdict. The framingConn enforces the header limit exactly;
// net/http's own (which reads up to 4 KiB more) never refuses a header
// block the framingConn let through.
func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           s.handOver(expectGuard{h}),
		ConnState:         s.connState,
		ReadHeaderTimeout: s.timeouts.ReadHeader,
		IdleTimeout:       s.timeouts.Idle,
		MaxHeaderBytes:    s.maxHdr,
		ErrorLog:          s.stdLogger(),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// framingConnState tells a framingConn that net/http finished a request and
// keeps the connection (it ends a connection it cannot follow past that
// request), or hijacked it (it hands on what it held back for the tunnel).
func framingConnState(c net.Conn, st http.ConnState) {
	if fc, ok := c.(*framingConn); ok {
		fc.connState(st)
	}
}

// expectGuard ends the connection of a request with Expect: 100-continue
// whose handler answered without reading the body (a refusal): the client
// sends no body without 100 Continue, and closing the body (which the
// transport does on a failed dial) or finishing the request would make
// net/http wait for it. The answer is sent at once, then the connection is
// closed.
type expectGuard struct{ next http.Handler }

func (g expectGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fc, ok := r.Context().Value(connKey{}).(*framingConn)
	if !ok || r.Body == nil || r.Body == http.NoBody || !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		g.next.ServeHTTP(w, r)
		return
	}
	body := &readWatch{ReadCloser: r.Body}
	r.Body = body
	g.next.ServeHTTP(w, r)
	if !body.read.Load() && !fc.hijacked.Load() {
		fc.abandon()
	}
}

// readWatch notes whether a request body was ever read. Closed unread, it
// leaves the body alone: closing it would read it to its end first.
type readWatch struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *readWatch) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.ReadCloser.Read(p)
}

func (b *readWatch) Close() error {
	if !b.read.Load() {
		return nil
	}
	return b.ReadCloser.Close()
}

// SetPolicy swaps in a new policy for requests that start from now on;
// requests and tunnels already open keep the one they started with.
func (s *Server) SetPolicy(p *config.Policy) error {
	if err := validatePolicy(p, s.leaves); err != nil {
		return err
	}
	s.policy.Store(p)
	// Pooled upstream connections were judged under the old policy.
	s.transports.reset()
	return nil
}

func validatePolicy(p *config.Policy, leaves *ca.LeafCache) error {
	switch {
	case p == nil || p.Allowlist == nil || p.Addrs == nil:
		return errors.New("proxy: a policy with an allowlist and an address policy is required")
	case p.HasTransforms() && leaves == nil:
		return errors.New("proxy: transforms need a CA to intercept TLS with")
	}
	return nil
}

// Policy returns the policy new requests, tunnels and queries are judged
// by. The gateway's DNS server reads it too: one policy generation for
// every server.
func (s *Server) Policy() *config.Policy { return s.policy.Load() }

type connKey struct{}

// Serve accepts connections on ln until Shutdown. It returns
// http.ErrServerClosed after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	ln = &watchListener{Listener: &limitedListener{Listener: ln, s: s, answerIn: true}, s: s}
	return s.http.Serve(&framingListener{Listener: ln, maxHeader: s.maxHdr})
}

// Shutdown stops accepting, waits for in-flight requests and tunnels until ctx
// is done, then closes whatever is left, hijacked connections included.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for _, ln := range s.transparent {
		_ = ln.Close()
	}
	s.mu.Unlock()
	err := s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.tunnels.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		sessions := make([]*session, 0, len(s.hijacked))
		for ss := range s.hijacked {
			sessions = append(sessions, ss)
		}
		s.mu.Unlock()
		for _, ss := range sessions {
			ss.abort()
		}
		<-done
	}
	// No tunnel is left to park or be parked.
	s.closeParker()
	if err != nil {
		_ = s.http.Close()
	}
	s.transports.reset()
	return err
}

func (s *Server) track(ss *session) {
	s.mu.Lock()
	s.hijacked[ss] = struct{}{}
	s.mu.Unlock()
}

func (s *Server) untrack(ss *session) {
	s.mu.Lock()
	delete(s.hijacked, ss)
	s.mu.Unlock()
}

// ServeHTTP dispatches: CONNECT is ours from the first byte (so nothing is
// dialled or answered before the policy has spoken); everything else is
// forwarded by goproxy with our handlers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		s.serveConnect(w, r)
		return
	}
	s.forwarder.ServeHTTP(w, r)
}

// dialUpstream is the forwarding transport's dial hook: the guard of the
// request being dialled for, which carries the policy and entry it was
// judged by. A dial without one is refused: nothing reaches an upstream
// that was not judged.
func (s *Server) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	ex, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return nil, errUnjudged
	}
	return ex.guard.DialContext(ctx, network, addr)
}

// errUnjudged: a request reached the upstream side without the state its
// judgement left. It is a bug; the request fails rather than being judged
// by whatever policy is current.
var errUnjudged = errors.New("proxy: a request without its judgement reached the upstream side")

// framingListener wraps every accepted connection in a framingConn.
type framingListener struct {
	net.Listener
	maxHeader int
}

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newFramingConn(c, l.maxHeader), nil
}
