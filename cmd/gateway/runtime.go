package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/admin"
	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/metrics"
	"github.com/hookgate/hookgate/proxy"
	"github.com/hookgate/hookgate/sandbox/dnsserver"
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
	recent  *admin.Ring[any]
	leaves  *ca.LeafCache
	caPEM   []byte
	token   string // the admin API's bearer token; "" for none
	own     []netip.Addr
	proxy   *proxy.Server
	dns     *dnsserver.Server

	reloadMu   sync.Mutex // one reload at a time (SIGHUP and the admin API)
	cfg        atomic.Pointer[config.Config]
	dnsPolicy  atomic.Pointer[dnsserver.Policy]
	generation atomic.Uint64
	ready      atomic.Bool
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
		recent:  admin.NewRing[any](recentDecisions),
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
	resolver := newResolver(cfg.DNSServers, o.dialControl)
	g.proxy, err = proxy.New(proxy.Options{
		Policy: p,
		// Names only: every address is judged again on every dial.
		Resolver:      proxy.NewCachingResolver(resolver, 0, 0),
		UpstreamRoots: roots,
		Logger:        logger,
		Leaves:        leaves,
		Limits:        proxy.Limits{MaxConns: cfg.MaxConnections, MaxConnsPerClient: cfg.MaxConnectionsPerClient},
		Observer:      g.observer(),
		DialControl:   o.dialControl,
	})
	if err != nil {
		return nil, err
	}
	g.dnsPolicy.Store(g.dnsServerPolicy(cfg, p))
	g.dns = dnsserver.New(dnsserver.Options{
		Policy:     g.dnsPolicy.Load,
		Resolver:   resolver,
		Logger:     logger,
		OnDecision: g.dnsDecision,
		Timeout:    cfg.Timeouts.Resolve,
	})
	g.cfg.Store(cfg)
	g.generation.Store(1)
	g.metrics.SetGeneration(1)
	return g, nil
}

// policy builds the proxy's policy from a config.
func (g *gateway) policy(cfg *config.Config) (*proxy.Policy, error) {
	own := g.own
	if cfg.DNSDenied == config.DNSDeniedSinkhole {
		// Never dialled, whatever allow_cidrs says: a connection to them
		// that names no host is refused like one to the gateway itself.
		own = append(slices.Clip(own), g.opts.sinkhole...)
	}
	addrs, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{
		AllowCIDRs: cfg.AllowCIDRs,
		Own:        own,
		Exempt:     g.opts.exempt,
	})
	if err != nil {
		return nil, err
	}
	entries := make([]proxy.EntryRules, len(cfg.Entries))
	for i, e := range cfg.Entries {
		entries[i] = proxy.EntryRules{Transform: e.Transform, AllowPlaintext: e.AllowPlaintext, ResponseHeaderTimeout: e.ResponseHeaderTimeout, Addresses: e.Addresses}
	}
	return &proxy.Policy{Allowlist: cfg.Allowlist, Addrs: addrs, Entries: entries, Timeouts: proxyTimeouts(cfg.Timeouts)}, nil
}

// dnsServerPolicy is the DNS server's policy for a config and the proxy's
// policy built from it.
func (g *gateway) dnsServerPolicy(cfg *config.Config, p *proxy.Policy) *dnsserver.Policy {
	dp := &dnsserver.Policy{Allowlist: p.Allowlist, Addrs: p.Addrs}
	if cfg.DNSDenied == config.DNSDeniedSinkhole {
		dp.Sinkhole = g.opts.sinkhole
	}
	return dp
}

// proxyTimeouts are the config's timeouts for the proxy's policy, so that
// a reload applies them to new requests and tunnels.
func proxyTimeouts(t config.Timeouts) proxy.Timeouts {
	return proxy.Timeouts{
		Resolve:        t.Resolve,
		Dial:           t.Dial,
		TLSHandshake:   t.TLSHandshake,
		ResponseHeader: t.ResponseHeader,
		TunnelIdle:     t.TunnelIdle,
	}
}

// reload builds and validates the whole new config, then swaps it in:
// requests and tunnels already open finish under the policy they started
// with, new ones get the new one. On any error the old config stays.
func (g *gateway) reload(context.Context) (uint64, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	gen, err := g.swap()
	g.metrics.Reload(err == nil)
	if err != nil {
		g.log.Error().Err(err).Msg("config reload failed; the previous config stays in force")
		return 0, err
	}
	g.metrics.SetGeneration(gen)
	g.log.Info().Uint64("generation", gen).Int("allowlist_entries", len(g.cfg.Load().Allowlist.Entries())).Msg("config reloaded")
	return gen, nil
}

func (g *gateway) swap() (uint64, error) {
	cfg, err := loadGatewayConfig(g.opts)
	if err != nil {
		return 0, err
	}
	for _, w := range cfg.Warnings {
		g.log.Warn().Str("problem", w.Error()).Msg("config")
	}
	if changed := restartOnly(g.cfg.Load(), cfg); len(changed) > 0 {
		g.log.Warn().Strs("fields", changed).Msg("these settings change only on restart; the rest of the new config applies now")
	}
	p, err := g.policy(cfg)
	if err != nil {
		return 0, err
	}
	if err := g.proxy.SetPolicy(p); err != nil {
		return 0, fmt.Errorf("%s: %w (the CA is read at start: restart to add one)", cfg.File, err)
	}
	g.dnsPolicy.Store(g.dnsServerPolicy(cfg, p))
	g.cfg.Store(cfg)
	if g.leaves != nil {
		// Leaves of hosts that no longer get credentials are dropped.
		g.leaves.Retain(func(host string) bool {
			v := p.Allowlist.Decide(host)
			return v.Allowed && v.Entry.Index < len(p.Entries) && p.Entries[v.Entry.Index].Transform != nil
		})
	}
	return g.generation.Add(1), nil
}

// restartOnly lists the settings that differ between two configs but are
// read only at start.
func restartOnly(old, cur *config.Config) []string {
	var changed []string
	check := func(name string, differ bool) {
		if differ {
			changed = append(changed, name)
		}
	}
	check("listen", old.ProxyListen != cur.ProxyListen || old.TransparentListen != cur.TransparentListen ||
		old.DNSListen != cur.DNSListen || old.AdminListen != cur.AdminListen)
	check("network.dns.servers", fmt.Sprint(old.DNSServers) != fmt.Sprint(cur.DNSServers))
	check("upstream.ca_file", old.UpstreamCAFile != cur.UpstreamCAFile)
	check("ca", old.CACertFile != cur.CACertFile || old.CAKeyFile != cur.CAKeyFile)
	check("admin.token_file", old.AdminTokenFile != cur.AdminTokenFile)
	check("limits", old.MaxConnections != cur.MaxConnections || old.MaxConnectionsPerClient != cur.MaxConnectionsPerClient ||
		old.ShutdownGrace != cur.ShutdownGrace)
	check("log.level", old.LogLevel != cur.LogLevel)
	// The proxy's lookups take a new timeouts.resolve at once; the DNS
	// server's are bounded by the one it started with.
	check("timeouts.resolve (for the sandbox's DNS server)", old.Timeouts.Resolve != cur.Timeouts.Resolve)
	return changed
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
			if len(r.Injected) > 0 {
				g.metrics.Injection(r.Entry)
			}
			if strings.HasPrefix(string(r.Code), "upstream-") {
				g.metrics.UpstreamError(string(r.Code))
			}
			g.metrics.Bytes(metrics.DirectionIn, r.BytesIn)
			g.metrics.Bytes(metrics.DirectionOut, r.BytesOut)
			g.recent.Add(proxyDecision{Kind: "proxy", Record: r})
		},
		Tunnel: func(delta int) {
			if delta > 0 {
				g.metrics.TunnelOpened()
			} else {
				g.metrics.TunnelClosed()
			}
		},
		Limited: func(c proxy.Code) { g.metrics.Limited(string(c)) },
	}
}

func (g *gateway) dnsDecision(d dnsserver.Decision) {
	g.metrics.DNS(d.Verdict)
	g.recent.Add(dnsDecisionView{
		Kind: "dns", Time: time.Now().Add(-d.Duration), Client: d.Client, Name: d.Name, Type: d.Type,
		Verdict: d.Verdict, Reason: d.Reason, Cached: d.Cached, DurationMS: float64(d.Duration.Microseconds()) / 1000,
	})
}

// adminHandler is the admin API over this gateway.
func (g *gateway) adminHandler(token string) http.Handler {
	return admin.New(admin.Options{
		Logger:    g.log.With().Str("component", "admin").Logger(),
		Token:     token,
		Ready:     g.readiness,
		Metrics:   g.metrics.Handler(),
		CAPEM:     func() []byte { return g.caPEM },
		Config:    func() any { return newConfigView(g.cfg.Load(), g.generation.Load()) },
		Reload:    g.reload,
		Decisions: func(limit int) any { return g.recent.Last(limit) },
		Redact:    g.proxy.Redact,
	})
}

func (g *gateway) readiness() error {
	if !g.ready.Load() {
		return fmt.Errorf("listeners not up yet")
	}
	return nil
}

// serveAdmin serves the admin API on ln until the returned server is shut
// down.
func serveAdmin(h http.Handler, ln net.Listener) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	go func() { _ = srv.Serve(ln) }()
	return srv
}
