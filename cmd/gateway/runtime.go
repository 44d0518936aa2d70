package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/dnsserver"
	"github.com/hookgate/hookgate/internal/admin"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/resolve"
	"github.com/hookgate/hookgate/proxy"
)

// recentDecisions is how many decisions the admin API keeps for
// GET /v1/decisions.
const recentDecisions = 1000

// gatewayOptions are what the command line adds to the config file.
type gatewayOptions struct {
	configFile  string // "": the built-in default
	listenProxy string // --listen: overrides listen.proxy
	listenAdmin string // --admin: overrides listen.admin
	upstreamCA  string // --upstream-ca: more roots on top of upstream.ca_file
	exempt      []netip.AddrPort
	// dialControl marks the gateway's own sockets (SO_MARK) so that redirect
	// rules in a shared namespace let them through; nil: no mark.
	dialControl func(network, address string, c syscall.RawConn) error
	// sinkhole are the DNS server's answers for denied names when the
	// config says network.dns.denied: sinkhole (see sinkholeAddrs).
	sinkhole []netip.Addr
}

// gateway is one running gateway: the proxy, the sandbox's DNS server, the
// metrics, the ring of recent decisions, and hot reload of the config.
type gateway struct {
	opts    gatewayOptions
	log     zerolog.Logger
	metrics *metrics.Metrics
	recent  *admin.Ring[recentDecision]
	leaves  *ca.LeafCache
	caPEM   []byte
	token   string // the admin API's bearer token; "" for none
	own     []netip.Addr
	proxy   *proxy.Server
	dns     *dnsserver.Server
	// names remembers the DNS server's answers for transparent raw
	// tunnels (raw_ports reached through the sandbox's DNS).
	names *proxy.ResolvedNames

	reloadMu sync.Mutex // one reload at a time (SIGHUP and the admin API)
	// cfg is the config in force: the settings read only at start keep
	// the values the gateway started with, whatever the file says now.
	cfg atomic.Pointer[config.Config]
	// pending names the settings of the last file loaded that differ from
	// the values in force and wait for a restart.
	pending    atomic.Pointer[[]string]
	generation atomic.Uint64
	ready      atomic.Bool

	// admin is where the admin API listens (nil: nowhere) and adminToken
	// whether it requires a token; both are fixed at start.
	admin      net.Addr
	adminToken bool
}

// loadGatewayConfig reads the config and applies the command line's
// overrides.
func loadGatewayConfig(o gatewayOptions) (*config.Config, error) {
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return nil, err
	}
	if o.listenProxy != "" {
		cfg.ProxyListen = o.listenProxy
	}
	if o.listenAdmin != "" {
		cfg.AdminListen = o.listenAdmin
	}
	return cfg, nil
}

// newGateway builds a gateway for cfg; own are the addresses it listens on
// (with this host's interface addresses, never to be dialled).
func newGateway(o gatewayOptions, cfg *config.Config, own []netip.Addr, logger zerolog.Logger) (*gateway, error) {
	g := &gateway{
		opts:    o,
		log:     logger,
		metrics: metrics.New(),
		recent:  admin.NewRing[recentDecision](recentDecisions),
		own:     append(own, interfaceAddresses()...),
	}
	files, err := openGatewayFiles(cfg, o.upstreamCA)
	if err != nil {
		return nil, err
	}
	g.leaves, g.caPEM, g.token = files.leaves, files.caPEM, files.token
	leaves, roots := files.leaves, files.roots
	p, err := g.policy(cfg)
	if err != nil {
		return nil, err
	}
	p.SetGeneration(1)
	resolver := newResolver(cfg.DNSServers, o.dialControl)
	g.names = proxy.NewResolvedNames(0)
	g.proxy, err = proxy.New(proxy.Options{
		Policy: p,
		// Names only: every address is judged again on every dial.
		Resolver:      resolve.NewCache(resolver, 0, 0),
		UpstreamRoots: roots,
		Logger:        logger,
		Leaves:        leaves,
		Limits:        proxy.Limits{MaxConns: cfg.MaxConnections, MaxConnsPerClient: cfg.MaxConnectionsPerClient},
		Observer:      g.observer(),
		DialControl:   o.dialControl,
		Names:         g.names,
	})
	if err != nil {
		return nil, err
	}
	g.dns = dnsserver.New(dnsserver.Options{
		// The proxy's policy: one generation for both servers.
		Policy:       g.proxy.Policy,
		Resolver:     resolver,
		Logger:       logger,
		BeforeAnswer: g.rememberAnswer,
		OnDecision:   g.dnsDecision,
		Timeout:      cfg.Timeouts.Resolve,
	})
	g.cfg.Store(cfg)
	g.pending.Store(&[]string{})
	g.generation.Store(1)
	g.metrics.SetGeneration(1)
	g.announceMode(cfg)
	return g, nil
}

// policy compiles the policy of a config on this host: the gateway's own
// addresses, the exempt upstreams and the sinkhole addresses.
func (g *gateway) policy(cfg *config.Config) (*config.Policy, error) {
	return cfg.Policy(config.PolicyOptions{Own: g.own, Exempt: g.opts.exempt, Sinkhole: g.opts.sinkhole})
}

// reload builds and validates the whole new config, then swaps it in:
// requests and tunnels already open finish under the policy they started
// with, new ones get the new one. On any error the old config stays.
//
// The answer, and the "config reloaded" line, list the settings the new
// file changes that are read only at start (pending_restart); those keep
// their values until a restart.
func (g *gateway) reload(context.Context) (admin.ReloadResult, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	gen, err := g.swap()
	g.metrics.Reload(err == nil)
	if err != nil {
		g.log.Error().Err(err).Msg("config reload failed; the previous config stays in force")
		return admin.ReloadResult{}, err
	}
	g.metrics.SetGeneration(gen)
	pending := *g.pending.Load()
	ev := g.log.Info()
	if len(pending) > 0 {
		ev = g.log.Warn()
	}
	ev.Uint64("generation", gen).Int("allowlist_entries", len(g.cfg.Load().Allowlist.Entries())).
		Strs("pending_restart", pending).
		Msg("config reloaded")
	g.warnOpenAdmin()
	g.announceMode(g.cfg.Load())
	return admin.ReloadResult{Generation: gen, PendingRestart: pending}, nil
}

func (g *gateway) swap() (uint64, error) {
	loaded, err := loadGatewayConfig(g.opts)
	if err != nil {
		return 0, err
	}
	for _, w := range loaded.Warnings {
		g.log.Warn().Str("problem", w.Error()).Msg("config")
	}
	cur := g.cfg.Load()
	cfg, pending := inForce(cur, loaded)
	p, err := g.policy(cfg)
	if err != nil {
		return 0, err
	}
	p.SetGeneration(g.generation.Load() + 1) // under reloadMu
	if err := g.proxy.SetPolicy(p); err != nil {
		return 0, fmt.Errorf("%s: %w (the CA is read at start: restart to add one)", cfg.File, err)
	}
	g.cfg.Store(cfg)
	g.pending.Store(&pending)
	if g.leaves != nil {
		// Leaves of hosts that no longer get credentials (from the
		// top-level policy or any tenant's) are dropped.
		g.leaves.Retain(p.Intercepts)
	}
	return g.generation.Add(1), nil
}

// startSetting is a setting read only at start: a reload that changes it
// leaves the value the gateway started with in force until a restart.
type startSetting struct {
	name   string
	differ func(a, b *config.Config) bool
	keep   func(dst, src *config.Config) // dst takes src's value
}

// startSettings are the settings read only at start. (The shutdown grace
// is not one: it is read when the shutdown begins.)
func startSettings() []startSetting {
	return []startSetting{
		{"listen.proxy", func(a, b *config.Config) bool { return a.ProxyListen != b.ProxyListen },
			func(d, s *config.Config) { d.ProxyListen = s.ProxyListen }},
		{"listen.proxy_tls", func(a, b *config.Config) bool { return !reflect.DeepEqual(a.ProxyTLS, b.ProxyTLS) },
			func(d, s *config.Config) { d.ProxyTLS = s.ProxyTLS }},
		{"listen.transparent", func(a, b *config.Config) bool { return a.TransparentListen != b.TransparentListen },
			func(d, s *config.Config) { d.TransparentListen = s.TransparentListen }},
		{"listen.dns", func(a, b *config.Config) bool { return a.DNSListen != b.DNSListen },
			func(d, s *config.Config) { d.DNSListen = s.DNSListen }},
		{"listen.admin", func(a, b *config.Config) bool { return a.AdminListen != b.AdminListen },
			func(d, s *config.Config) { d.AdminListen = s.AdminListen }},
		{"network.dns.servers", func(a, b *config.Config) bool { return !slices.Equal(a.DNSServers, b.DNSServers) },
			func(d, s *config.Config) { d.DNSServers = s.DNSServers }},
		{"upstream.ca_file", func(a, b *config.Config) bool { return a.UpstreamCAFile != b.UpstreamCAFile },
			func(d, s *config.Config) { d.UpstreamCAFile = s.UpstreamCAFile }},
		{"ca.cert_file", func(a, b *config.Config) bool { return a.CACertFile != b.CACertFile },
			func(d, s *config.Config) { d.CACertFile = s.CACertFile }},
		{"ca.key_file", func(a, b *config.Config) bool { return a.CAKeyFile != b.CAKeyFile },
			func(d, s *config.Config) { d.CAKeyFile = s.CAKeyFile }},
		{"admin.token_file", func(a, b *config.Config) bool { return a.AdminTokenFile != b.AdminTokenFile },
			func(d, s *config.Config) { d.AdminTokenFile = s.AdminTokenFile }},
		{"admin.pprof", func(a, b *config.Config) bool { return a.AdminPprof != b.AdminPprof },
			func(d, s *config.Config) { d.AdminPprof = s.AdminPprof }},
		{"limits.max_connections", func(a, b *config.Config) bool { return a.MaxConnections != b.MaxConnections },
			func(d, s *config.Config) { d.MaxConnections = s.MaxConnections }},
		{"limits.max_connections_per_client", func(a, b *config.Config) bool { return a.MaxConnectionsPerClient != b.MaxConnectionsPerClient },
			func(d, s *config.Config) { d.MaxConnectionsPerClient = s.MaxConnectionsPerClient }},
		{"log.level", func(a, b *config.Config) bool { return a.LogLevel != b.LogLevel },
			func(d, s *config.Config) { d.LogLevel = s.LogLevel }},
		// The proxy's lookups take a new resolve timeout at once; the
		// sandbox DNS server's stay bounded by the one it started with.
		{"timeouts.resolve (the sandbox DNS server's lookups)",
			func(a, b *config.Config) bool { return a.Timeouts.Resolve != b.Timeouts.Resolve },
			func(*config.Config, *config.Config) {}},
	}
}

// inForce is the config that applies after loading loaded while running
// under cur: loaded, except that every setting read only at start keeps
// its value in cur. pending names those whose loaded value differs (never
// nil).
func inForce(cur, loaded *config.Config) (cfg *config.Config, pending []string) {
	merged := *loaded
	pending = []string{}
	for _, st := range startSettings() {
		if st.differ(cur, loaded) {
			pending = append(pending, st.name)
		}
		st.keep(&merged, cur)
	}
	return &merged, pending
}

// warnOpenAdmin warns when the admin API can be reached beyond loopback
// and asks for no token: anyone who reaches it can reload the config and
// read the decisions.
func (g *gateway) warnOpenAdmin() {
	if g.admin == nil || g.adminToken {
		return
	}
	ap, err := netip.ParseAddrPort(g.admin.String())
	if err == nil && ap.Addr().IsLoopback() {
		return
	}
	g.log.Warn().Str("admin", g.admin.String()).
		Msg("the admin API listens beyond loopback without a token: whoever reaches it can reload the config and read every decision; set admin.token_file, or listen on 127.0.0.1")
}

// recentDecision is one decision in the ring of recent decisions: a proxy
// decision or a DNS answer. The ring holds it by value, so that adding the
// decision of every request allocates nothing (an interface value would
// box each record on the heap).
type recentDecision struct {
	dns    bool // which of the two it is
	proxy  proxyDecision
	answer dnsDecisionView
}

// MarshalJSON encodes the decision it holds.
func (d recentDecision) MarshalJSON() ([]byte, error) {
	if d.dns {
		return json.Marshal(d.answer)
	}
	return json.Marshal(d.proxy)
}

// tenant is the tenant of the decision; "" for none.
func (d recentDecision) tenant() string {
	if d.dns {
		return d.answer.Tenant
	}
	return d.proxy.Tenant
}

// proxyDecision is a proxy decision in the ring of recent decisions.
type proxyDecision struct {
	Kind string `json:"kind"`
	proxy.Record
}

// dnsDecision is a DNS answer in the ring of recent decisions.
type dnsDecisionView struct {
	Kind       string    `json:"kind"`
	Time       time.Time `json:"time"`
	Client     string    `json:"client"`
	Tenant     string    `json:"tenant,omitempty"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Verdict    string    `json:"verdict"`
	Reason     string    `json:"reason,omitempty"`
	Cached     bool      `json:"cached"`
	DurationMS float64   `json:"duration_ms"`
}

func (g *gateway) observer() proxy.Observer {
	return proxy.Observer{
		Decision: func(r proxy.Record) {
			g.metrics.Request(r.Mode, r.Verdict, string(r.Code), r.Entry)
			g.metrics.TenantRequest(r.Tenant, r.Verdict, string(r.Code))
			if len(r.Injected) > 0 {
				g.metrics.Injection(r.Entry)
			}
			if strings.HasPrefix(string(r.Code), "upstream-") {
				g.metrics.UpstreamError(string(r.Code))
			}
			g.metrics.Bytes(metrics.DirectionIn, r.BytesIn)
			g.metrics.Bytes(metrics.DirectionOut, r.BytesOut)
			g.recent.Add(recentDecision{proxy: proxyDecision{Kind: "proxy", Record: r}})
		},
		Tunnel: func(delta int) {
			if delta > 0 {
				g.metrics.TunnelOpened()
			} else {
				g.metrics.TunnelClosed()
			}
		},
		Limited:    func(c proxy.Code) { g.metrics.Limited(string(c)) },
		Connection: g.metrics.ActiveConnections,
	}
}

// rememberAnswer keeps which name the sandbox's DNS answered with which
// addresses, before the answer leaves: a client that connects the moment
// it has the answer finds its name remembered (raw_ports need it). Only
// names the policy allowed, answered with their real addresses: never a
// sinkhole answer, nor report mode's would-deny.
func (g *gateway) rememberAnswer(d dnsserver.Decision) {
	if d.Verdict == dnsserver.VerdictAnswer && d.Reason == dnsserver.ReasonAllowed && len(d.Addrs) > 0 {
		if client, err := netip.ParseAddrPort(d.Client); err == nil {
			g.names.Remember(client.Addr(), d.Name, d.Addrs, d.TTL)
		}
	}
}

func (g *gateway) dnsDecision(d dnsserver.Decision) {
	g.metrics.DNS(d.Verdict)
	g.recent.Add(recentDecision{dns: true, answer: dnsDecisionView{
		Kind: "dns", Time: time.Now().Add(-d.Duration), Client: d.Client, Tenant: d.Tenant, Name: d.Name, Type: d.Type,
		Verdict: d.Verdict, Reason: d.Reason, Cached: d.Cached, DurationMS: durationMS(d.Duration),
	}})
}

// adminHandler is the admin API over this gateway; pprof serves Go's
// profiles on it (admin.pprof, read at start).
func (g *gateway) adminHandler(token string, pprof bool) http.Handler {
	return admin.New(admin.Options{
		Logger:    g.log.With().Str("component", "admin").Logger(),
		Token:     token,
		Pprof:     pprof,
		Ready:     g.readiness,
		Metrics:   g.metrics.Handler(),
		CAPEM:     func() []byte { return g.caPEM },
		Config:    func() any { return newConfigView(g.cfg.Load(), g.generation.Load(), *g.pending.Load()) },
		Reload:    g.reload,
		Decisions: func(limit int) any { return g.recent.Last(limit) },
		TenantDecisions: func(limit int, tenant string) any {
			return g.recent.Matching(limit, func(d recentDecision) bool { return d.tenant() == tenant })
		},
		Redact: g.proxy.Redact,
	})
}

func (g *gateway) readiness() error {
	if !g.ready.Load() {
		return fmt.Errorf("listeners not up yet")
	}
	return nil
}

// serveAdmin serves the admin API on ln until the returned server is shut
// down. If serving fails before that, the error is logged: the proxy goes
// on, but the operator must learn that the admin API is gone.
func serveAdmin(h http.Handler, ln net.Listener, logger zerolog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	go func() {
		if err := ignoreClosed(srv.Serve(ln)); err != nil {
			logger.Error().Err(err).Str("admin", ln.Addr().String()).Msg("the admin API stopped serving")
		}
	}()
	return srv
}
