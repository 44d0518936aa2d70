package config

import "strings"

// Values of network.mode.
const (
	// ModeEnforce refuses what the allowlist denies (the default).
	ModeEnforce = "enforce"
	// ModeReport lets through what the allowlist denies, logging it as
	// would-deny, so that an allowlist can be built from real traffic
	// before it is enforced. The address policy is enforced all the same,
	// and nothing is injected into a host the allowlist denies.
	ModeReport = "report"
)

func (c *Config) compileMode(s string, r *reporter) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "", ModeEnforce:
		c.Mode = ModeEnforce
	case ModeReport:
		c.Mode = ModeReport
	default:
		c.Mode = ModeEnforce
		r.at("network.mode", "%q is not a choice; use enforce (the default) or report", s)
	}
}

// Reporting reports whether the config is in report mode.
func (c *Config) Reporting() bool { return c.Mode == ModeReport }
