package main

import (
	"net/netip"

	"github.com/hookgate/hookgate/config"
)

// configView is the config in force as GET /v1/config shows it: every
// setting, with transform values as written (their ${env:...} and
// ${file:...} references), never the secrets they resolved to. Settings
// read only at start show the values the gateway started with; those the
// file has changed since are named in pending_restart.
type configView struct {
	File           string            `json:"file"`
	Generation     uint64            `json:"generation"`
	PendingRestart []string          `json:"pending_restart"`
	Listen         listenView        `json:"listen"`
	Allowlist      []entryView       `json:"allowlist"`
	AllowCIDRs     []string          `json:"allow_cidrs"`
	DNSServers     []string          `json:"dns_servers"`
	DNSDenied      string            `json:"dns_denied"`
	Timeouts       map[string]string `json:"timeouts"`
	Upstream       upstreamView      `json:"upstream"`
	CA             caView            `json:"ca"`
	Admin          adminView         `json:"admin"`
	Limits         limitsView        `json:"limits"`
	Log            map[string]string `json:"log"`
	Tenants        []tenantView      `json:"tenants,omitempty"`
}

type listenView struct {
	Proxy       string `json:"proxy"`
	Transparent string `json:"transparent"`
	DNS         string `json:"dns"`
	Admin       string `json:"admin"`
}

type entryView struct {
	Domain         string            `json:"domain"`
	Kind           string            `json:"kind"`
	Transform      map[string]string `json:"transform,omitempty"`
	Credentials    string            `json:"credentials,omitempty"`
	Scope          string            `json:"scope,omitempty"`
	AllowPlaintext bool              `json:"allow_plaintext,omitempty"`
	Timeouts       map[string]string `json:"timeouts,omitempty"`
	Addresses      []string          `json:"addresses,omitempty"`
}

type upstreamView struct {
	CAFile string `json:"ca_file"`
}

type caView struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

type adminView struct {
	TokenFile string `json:"token_file"`
	Pprof     bool   `json:"pprof"`
}

type limitsView struct {
	MaxConnections          int    `json:"max_connections"`
	MaxConnectionsPerClient int    `json:"max_connections_per_client"`
	ShutdownGrace           string `json:"shutdown_grace"`
}

func newConfigView(c *config.Config, generation uint64, pending []string) configView {
	v := configView{
		File:           c.File,
		Generation:     generation,
		PendingRestart: pending,
		Listen:         listenView{c.ProxyListen, c.TransparentListen, c.DNSListen, c.AdminListen},
		AllowCIDRs:     make([]string, 0, len(c.AllowCIDRs)),
		DNSServers:     make([]string, 0, len(c.DNSServers)),
		Upstream:       upstreamView{c.UpstreamCAFile},
		CA:             caView{c.CACertFile, c.CAKeyFile},
		Admin:          adminView{c.AdminTokenFile, c.AdminPprof},
		Limits:         limitsView{c.MaxConnections, c.MaxConnectionsPerClient, c.ShutdownGrace.String()},
		Log:            map[string]string{"level": c.LogLevel.String()},
		DNSDenied:      c.DNSDenied,
		Timeouts: map[string]string{
			"resolve": c.Timeouts.Resolve.String(), "dial": c.Timeouts.Dial.String(),
			"tls_handshake": c.Timeouts.TLSHandshake.String(), "response_header": c.Timeouts.ResponseHeader.String(),
			"tunnel_idle": c.Timeouts.TunnelIdle.String(),
		},
	}
	for _, e := range c.Allowlist.Entries() {
		ev := entryView{Domain: e.Domain, Kind: e.Kind.String()}
		if entry := c.EntryOf(e); entry != nil {
			if rules := entry.Transform; rules != nil {
				ev.Transform = rules.References()
				ev.Credentials, ev.Scope = rules.Describe(), entry.Scope.String()
			}
			ev.AllowPlaintext = entry.AllowPlaintext
			if d := entry.ResponseHeaderTimeout; d > 0 {
				ev.Timeouts = map[string]string{"response_header": d.String()}
			}
			for _, p := range entry.Addresses {
				ev.Addresses = append(ev.Addresses, p.String())
			}
		}
		v.Allowlist = append(v.Allowlist, ev)
	}
	for _, p := range c.AllowCIDRs {
		v.AllowCIDRs = append(v.AllowCIDRs, p.String())
	}
	for _, s := range c.DNSServers {
		v.DNSServers = append(v.DNSServers, netip.AddrPort.String(s))
	}
	v.Tenants = tenantViews(c)
	return v
}
