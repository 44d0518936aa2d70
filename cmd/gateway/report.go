package main

import "github.com/hookgate/hookgate/config"

// announceMode publishes the config's network.mode in /metrics and, in
// report mode, warns loudly: at start and on every reload, so that a
// forgotten rollout setting cannot hide in an old log.
// A tenant's own network.mode counts too: the gauge is 1 while any policy
// of the gateway reports.
func (g *gateway) announceMode(cfg *config.Config) {
	reporting := cfg.Reporting()
	if reporting {
		g.log.Warn().Str("mode", cfg.Mode).
			Msg("REPORT MODE: network.mode is report: hosts the allowlist denies are LET THROUGH (logged as verdict would-deny, without credentials, and never past the address policy); set network.mode: enforce once the allowlist is complete")
	}
	for _, t := range cfg.Tenants {
		if t.Mode == config.ModeReport {
			reporting = true
			g.log.Warn().Str("tenant", t.Name).Str("mode", t.Mode).
				Msg("REPORT MODE for this tenant: hosts its allowlist denies are LET THROUGH (logged as verdict would-deny, without credentials, and never past the address policy)")
		}
	}
	g.metrics.SetReportMode(reporting)
}
