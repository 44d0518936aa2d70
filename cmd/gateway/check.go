package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

func runCheck(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", "Validate a gateway config file, open every file it names (the CA, upstream.ca_file,\n"+
		"admin.token_file) as serve would, and print what it configures.\n"+
		"Exits non-zero and lists every problem (file:line: field: message) on errors.", stdout)
	configFile := fs.String("config", "", "gateway config `file` to check (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *configFile == "" {
		return fmt.Errorf("%w: check needs --config FILE", errUsage)
	}
	cfg, err := loadConfig(*configFile)
	if err == nil {
		_, err = openGatewayFiles(cfg, "")
	}
	if err == nil && cfg.ProxyTLS != nil {
		_, err = proxyTLSConfig(cfg.ProxyTLS)
	}
	if err != nil {
		return &exitError{code: 1, msg: "invalid configuration:\n" + err.Error()}
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	fmt.Fprintf(stdout, "%s: OK\n", cfg.File)
	fmt.Fprintf(stdout, "  listen.proxy   %s\n", cfg.ProxyListen)
	entries := cfg.Allowlist.Entries()
	if len(entries) == 0 {
		fmt.Fprintln(stdout, "  allowlist      (empty: every host is denied)")
	}
	for i, e := range entries {
		label := "allowlist"
		if i > 0 {
			label = ""
		}
		kind := e.Kind.String()
		if entry := cfg.EntryOf(e); entry != nil && entry.ResponseHeaderTimeout > 0 {
			kind += ", response_header " + entry.ResponseHeaderTimeout.String()
		}
		if entry := cfg.EntryOf(e); entry != nil && len(entry.Ports)+len(entry.RawPorts) > 0 {
			kind += ", ports " + orDefault(joinPorts(entry.Ports), "any") + ", raw_ports " + orNone(joinPorts(entry.RawPorts))
		}
		if entry := cfg.EntryOf(e); entry != nil && entry.Transform != nil {
			// Kinds and names only: never a value.
			kind += ", credentials: " + entry.Transform.Describe() + "; scope: " + entry.Scope.String()
		}
		fmt.Fprintf(stdout, "  %-14s %s (%s)\n", label, e.Domain, kind)
	}
	cidrs := make([]string, len(cfg.AllowCIDRs))
	for i, p := range cfg.AllowCIDRs {
		cidrs[i] = p.String()
	}
	fmt.Fprintf(stdout, "  allow_cidrs    %s\n", orNone(strings.Join(cidrs, ", ")))
	servers := make([]string, len(cfg.DNSServers))
	for i, s := range cfg.DNSServers {
		servers[i] = s.String()
	}
	fmt.Fprintf(stdout, "  dns.servers    %s\n", orDefault(strings.Join(servers, ", "), "(system resolver)"))
	fmt.Fprintf(stdout, "  dns.denied     %s\n", cfg.DNSDenied)
	t := cfg.Timeouts
	fmt.Fprintf(stdout, "  timeouts       resolve %v, dial %v, tls_handshake %v, response_header %v, tunnel_idle %v\n",
		t.Resolve, t.Dial, t.TLSHandshake, t.ResponseHeader, t.TunnelIdle)
	fmt.Fprintf(stdout, "  upstream CA    %s\n", orDefault(cfg.UpstreamCAFile, "(system roots)"))
	fmt.Fprintf(stdout, "  log.level      %s\n", cfg.LogLevel)
	printTenants(stdout, cfg)
	return nil
}

func orNone(s string) string { return orDefault(s, "(none)") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func joinPorts(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
