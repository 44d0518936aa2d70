package main

import "github.com/hookgate/hookgate/config"

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
