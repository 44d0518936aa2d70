package main

import (
	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/proxy"
)

// announceMode publishes the config's network.mode in /metrics and, in
// report mode, warns loudly: at start and on every reload, so that a
// forgotten rollout setting cannot hide in an old log.
func (g *gateway) announceMode(cfg *config.Config) {
	g.metrics.SetReportMode(cfg.Reporting())
	if cfg.Reporting() {
		g.log.Warn().Str("mode", cfg.Mode).
			Msg("REPORT MODE: network.mode is report: hosts the allowlist denies are LET THROUGH (logged as verdict would-deny, without credentials, and never past the address policy); set network.mode: enforce once the allowlist is complete")
	}
}

// reportDNSAllowlist is the allowlist the sandbox's DNS server answers
// from: the proxy's, or in report mode one that allows every name, so that
// a would-deny host resolves and reaches the proxy, which logs it. The
// address policy still judges every answer.
func reportDNSAllowlist(p *proxy.Policy) *allowlist.Policy {
	if !p.Report {
		return p.Allowlist
	}
	all, err := allowlist.New([]string{"*"})
	if err != nil {
		return p.Allowlist
	}
	return all
}
