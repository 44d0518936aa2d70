package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/hookgate/hookgate/config"
)

// printTenants prints, for `gateway check`, each tenant: how its clients
// are recognised (credential kinds and users, never a secret or its hash),
// what it allows and what it injects (header names), and its limits.
func printTenants(w io.Writer, cfg *config.Config) {
	if len(cfg.Tenants) == 0 {
		return
	}
	fmt.Fprintf(w, "  auth.required  %v\n", cfg.AuthRequired)
	if cfg.ProxyTLS != nil {
		fmt.Fprintf(w, "  listen.proxy_tls  client CA %s\n", cfg.ProxyTLS.ClientCAFile)
	}
	for _, t := range cfg.Tenants {
		fmt.Fprintf(w, "  tenant %s\n", t.Name)
		fmt.Fprintf(w, "    identified by  %s\n", orNone(strings.Join(identifiedBy(t), "; ")))
		entries := t.Allowlist.Entries()
		if len(entries) == 0 {
			fmt.Fprintln(w, "    allowlist      (empty: every host is denied)")
		}
		for i, e := range entries {
			label := "allowlist"
			if i > 0 {
				label = ""
			}
			line := fmt.Sprintf("%s (%s)", e.Domain, e.Kind)
			if e.Index < len(t.Entries) {
				if names := t.Entries[e.Index].Transform.Names(); len(names) > 0 {
					line += " injects " + strings.Join(names, ", ")
				}
			}
			fmt.Fprintf(w, "    %-14s %s\n", label, line)
		}
		cidrs := make([]string, len(t.AllowCIDRs))
		for i, p := range t.AllowCIDRs {
			cidrs[i] = p.String()
		}
		fmt.Fprintf(w, "    allow_cidrs    %s\n", orNone(strings.Join(cidrs, ", ")))
		fmt.Fprintf(w, "    limits         %s\n", limitsText(t.Limits))
	}
}

func identifiedBy(t config.TenantConfig) []string {
	var out []string
	for _, c := range t.Credentials {
		out = append(out, "proxy_auth "+c.String())
	}
	if len(t.Clients) > 0 {
		cidrs := make([]string, len(t.Clients))
		for i, p := range t.Clients {
			cidrs[i] = p.String()
		}
		out = append(out, "clients "+strings.Join(cidrs, ", "))
	}
	if len(t.ClientCerts) > 0 {
		out = append(out, "client_certs "+strings.Join(t.ClientCerts, ", "))
	}
	return out
}

func limitsText(l config.TenantLimits) string {
	var parts []string
	if l.MaxConnections > 0 {
		parts = append(parts, fmt.Sprintf("max_connections %d", l.MaxConnections))
	}
	if l.RequestsPerSecond > 0 {
		parts = append(parts, fmt.Sprintf("requests_per_second %g (burst %d)", l.RequestsPerSecond, l.Burst))
	}
	if l.BytesPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("bytes_per_minute %d", l.BytesPerMinute))
	}
	return orNone(strings.Join(parts, ", "))
}

// tenantView is a tenant as GET /v1/config shows it: how it is recognised
// (credential kinds and users, never a secret or its hash), its allowlist
// with transforms as written, and its limits.
type tenantView struct {
	Name         string      `json:"name"`
	IdentifiedBy []string    `json:"identified_by"`
	Allowlist    []entryView `json:"allowlist"`
	AllowCIDRs   []string    `json:"allow_cidrs"`
	Limits       string      `json:"limits"`
}

func tenantViews(c *config.Config) []tenantView {
	var out []tenantView
	for _, t := range c.Tenants {
		tv := tenantView{Name: t.Name, IdentifiedBy: identifiedBy(t), Limits: limitsText(t.Limits), AllowCIDRs: []string{}}
		for _, e := range t.Allowlist.Entries() {
			ev := entryView{Domain: e.Domain, Kind: e.Kind.String()}
			if e.Index < len(t.Entries) {
				ev.Transform = t.Entries[e.Index].Transform.References()
				ev.AllowPlaintext = t.Entries[e.Index].AllowPlaintext
			}
			tv.Allowlist = append(tv.Allowlist, ev)
		}
		for _, p := range t.AllowCIDRs {
			tv.AllowCIDRs = append(tv.AllowCIDRs, p.String())
		}
		out = append(out, tv)
	}
	return out
}
