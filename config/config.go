package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/transform"
)

// Defaults for fields a file leaves out.
const (
	DefaultProxyListen             = "127.0.0.1:3128"
	DefaultAdminListen             = "127.0.0.1:9090"
	DefaultMaxConnections          = 4096
	DefaultMaxConnectionsPerClient = 512
	DefaultShutdownGrace           = 10 * time.Second
)

// Config is a validated gateway configuration.
type Config struct {
	// File is where the configuration came from, for messages.
	File string
	// ProxyListen is the explicit proxy's listen address; empty: none.
	ProxyListen string
	// TransparentListen accepts redirected connections (serve --redirect);
	// empty: none.
	TransparentListen string
	// DNSListen is the sandbox's DNS server (UDP and TCP); empty: none.
	DNSListen string
	// AdminListen is the admin API's address; empty: none.
	AdminListen string
	// AdminTokenFile holds the admin API's bearer token; empty: no token.
	AdminTokenFile string
	// AdminPprof serves Go's runtime profiles on the admin API
	// (/debug/pprof/); only with AdminTokenFile set (admin.pprof).
	AdminPprof bool
	// MaxConnections and MaxConnectionsPerClient bound client connections;
	// 0 means no limit.
	MaxConnections, MaxConnectionsPerClient int
	// ShutdownGrace is how long in-flight requests and tunnels may take to
	// finish on SIGTERM/SIGINT.
	ShutdownGrace time.Duration
	// Allowlist is the compiled network.allowlist.
	Allowlist *allowlist.Policy
	// AllowCIDRs re-open blocked non-loopback ranges (network.allow_cidrs).
	AllowCIDRs []netip.Prefix
	// DNSServers are the resolvers to use; empty means the system resolver.
	DNSServers []netip.AddrPort
	// DNSDenied is how the sandbox's DNS server answers a name the policy
	// denies: DNSDeniedRefuse or DNSDeniedSinkhole (network.dns.denied).
	DNSDenied string
	// Mode is ModeEnforce, or ModeReport: hosts the allowlist denies are
	// let through (never with credentials, never past the address policy)
	// and logged as would-deny (network.mode).
	Mode string
	// Timeouts bound the gateway's waits on upstreams; every field is set.
	Timeouts Timeouts
	// Entries holds, by allowlist index, what each entry adds; Policy
	// hands them to the compiled policy as they are.
	Entries []Entry
	// UpstreamCAFile adds roots for verifying upstream TLS; may be empty.
	UpstreamCAFile string
	// CACertFile and CAKeyFile are the gateway's own CA, which signs the
	// certificates of intercepted (transform) hosts; empty when unset.
	CACertFile, CAKeyFile string
	// LogLevel is the minimum level logged.
	LogLevel zerolog.Level
	// Tenants are the sandboxes a shared gateway tells apart, each with
	// its own network block (tenants); empty: one policy for every client.
	Tenants []TenantConfig
	// AuthRequired refuses clients that no tenant claims (auth.required).
	AuthRequired bool
	// ProxyTLS, if set, makes the explicit listener TLS with client
	// certificates (listen.proxy_tls).
	ProxyTLS *ProxyTLS
	// Warnings are things in the file that work but surely do not do what
	// was meant (an entry that can never be reached).
	Warnings []*Error
}

// Entry is what one allowlist entry adds to "allowed". A Policy's verdict
// points at its entry (Verdict.Entry), so that whoever serves the request
// holds the compiled entry itself.
type Entry struct {
	// Transform injects headers (with resolved secrets); nil for none.
	Transform *transform.Rules
	// AllowPlaintext lets the transform apply to plain HTTP.
	AllowPlaintext bool
	// ResponseHeaderTimeout replaces Timeouts.ResponseHeader for this
	// entry; 0: the top-level one.
	ResponseHeaderTimeout time.Duration
	// Addresses, if not empty, are the only ranges the entry's hosts may
	// resolve into (network.allowlist[].addresses).
	Addresses []netip.Prefix
	// Scope limits Transform to the requests it matches; nil: every
	// request.
	Scope *Scope
	// Ports, if not empty, are the only ports the entry's hosts may be
	// reached on (with RawPorts); empty: any port.
	Ports []uint16
	// RawPorts are the ports on which a CONNECT tunnel to the entry's
	// hosts is relayed as it is, without requiring TLS (SSH on 22).
	RawPorts []uint16
}

// HasTransforms reports whether any entry injects headers (and so the
// gateway needs its CA).
func (c *Config) HasTransforms() bool {
	if hasTransforms(c.Entries) {
		return true
	}
	for _, t := range c.Tenants {
		if hasTransforms(t.Entries) {
			return true
		}
	}
	return false
}

// EntryOf is what an allowlist entry of c adds: the one place that maps
// an allowlist entry to its Entry. Nil for an entry c does not know.
func (c *Config) EntryOf(e allowlist.Entry) *Entry {
	if e.Index < 0 || e.Index >= len(c.Entries) {
		return nil
	}
	return &c.Entries[e.Index]
}

func hasTransforms(entries []Entry) bool {
	for _, e := range entries {
		if e.Transform != nil {
			return true
		}
	}
	return false
}

// Options change how a file is read; the zero value reads secrets from the
// process environment and the file system.
type Options struct {
	// Transform resolves secret references; see transform.Options. Its Dir
	// defaults to the config file's directory.
	Transform transform.Options
}

// Load reads and validates the configuration file at path.
func Load(path string, opts Options) (*Config, error) {
	data, err := readCapped(path)
	if err != nil {
		return nil, err
	}
	if opts.Transform.Dir == "" {
		opts.Transform.Dir = filepath.Dir(path)
	}
	return Parse(path, data, opts)
}

// Parse validates a configuration; file names it in messages. The error, if
// any, is an Errors listing every problem found.
func Parse(file string, data []byte, opts Options) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, tooLarge(file)
	}
	root, errs := parseTree(file, data)
	if errs != nil {
		return nil, errs
	}
	var fc fileConfig
	checked := &treeChecker{file: file, errs: &errs, bad: map[string]bool{}}
	if root.Kind != 0 {
		checked.check(root, reflect.TypeOf(fc), "")
		if err := root.Decode(&fc); err != nil {
			return nil, append(errs, yamlErrors(file, data, err)...)
		}
	}
	c := &Config{File: file}
	r := &reporter{file: file, root: root, errs: &errs, bad: checked.bad}
	c.compileListen(fc.Listen, r)
	c.compileNetwork(fc.Network, r)
	c.compileEntries(fc.Network.Allowlist, opts.Transform, r)
	c.compileTimeouts(fc.Timeouts, fc.Network.Allowlist, r)
	c.compileDNSDenied(fc.Network.DNS.Denied, r)
	c.compileMode(fc.Network.Mode, r)
	c.compileTenants(fc.Tenants, fc.Auth, opts.Transform, r)
	c.compileProxyTLS(fc.Listen.ProxyTLS, opts.Transform.Dir, r)
	c.UpstreamCAFile = relativeTo(opts.Transform.Dir, fc.Upstream.CAFile)
	c.compileCA(fc.CA, opts.Transform.Dir, r)
	c.compileAdmin(fc.Admin, opts.Transform.Dir, r)
	c.compileLimits(fc.Limits, r)
	c.compileLog(fc.Log, r)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return nil, errs
	}
	c.Warnings = r.warnings
	return c, nil
}

// readCapped reads a file of at most MaxFileSize bytes.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

// reporter records errors with the line of the field they are about.
type reporter struct {
	file string
	root *yaml.Node
	errs *Errors
	// bad are the fields the tree check reported: their zero values raise
	// no second error.
	bad      map[string]bool
	warnings []*Error
	// prefix is put before every field named (a tenant's own network
	// block is reported as tenants[i].network...); root is then the
	// tenant's node, so that lines are found relative to it.
	prefix string
}

// at records an error about a field, at the field's line.
func (r *reporter) at(field, format string, args ...any) {
	r.atLine(lineOf(r.root, field), field, format, args...)
}

// atLine records an error at a known line.
func (r *reporter) atLine(line int, field, format string, args ...any) {
	if coveredBy(r.bad, r.prefix+field) {
		return
	}
	*r.errs = append(*r.errs, &Error{File: r.file, Line: line, Field: r.prefix + field, Msg: fmt.Sprintf(format, args...)})
}

// warn records a warning about a field.
func (r *reporter) warn(field, format string, args ...any) {
	r.warnings = append(r.warnings, &Error{File: r.file, Line: lineOf(r.root, field), Field: r.prefix + field, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) compileListen(l fileListen, r *reporter) {
	c.ProxyListen = stringOr(l.Proxy, DefaultProxyListen)
	c.TransparentListen = l.Transparent
	c.DNSListen = l.DNS
	c.AdminListen = stringOr(l.Admin, DefaultAdminListen)
	for _, l := range []struct{ field, addr string }{
		{"listen.proxy", c.ProxyListen}, {"listen.transparent", c.TransparentListen},
		{"listen.dns", c.DNSListen}, {"listen.admin", c.AdminListen},
	} {
		if l.addr == "" {
			continue
		}
		if err := ValidateListen(l.addr); err != nil {
			r.at(l.field, "%v", err)
		}
	}
	if c.ProxyListen == "" && c.TransparentListen == "" {
		r.at("listen", "nothing to serve: set listen.proxy, listen.transparent, or both")
	}
}

// stringOr is *p, or def when the field was left out (an explicit "" turns
// a listener off).
func stringOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// compileAdmin reads the admin block. Profiles are refused without a
// token: a goroutine dump shows every connection's stack and a CPU profile
// or trace costs CPU while it runs, so they are never served open, not
// even on loopback, where every process of the host could fetch them.
func (c *Config) compileAdmin(a fileAdmin, dir string, r *reporter) {
	c.AdminTokenFile = relativeTo(dir, a.TokenFile)
	c.AdminPprof = a.Pprof
	if c.AdminPprof && c.AdminTokenFile == "" {
		r.at("admin.pprof", "needs admin.token_file: profiles and goroutine dumps are for operators, served only behind the admin token; set admin.token_file, or turn pprof off")
	}
}

func (c *Config) compileLimits(l fileLimits, r *reporter) {
	c.MaxConnections, c.MaxConnectionsPerClient = DefaultMaxConnections, DefaultMaxConnectionsPerClient
	if l.MaxConnections != nil {
		c.MaxConnections = *l.MaxConnections
	}
	if l.MaxConnectionsPerClient != nil {
		c.MaxConnectionsPerClient = *l.MaxConnectionsPerClient
	}
	if c.MaxConnections < 0 {
		r.at("limits.max_connections", "must be 0 (no limit) or more, got %d", c.MaxConnections)
	}
	if c.MaxConnectionsPerClient < 0 {
		r.at("limits.max_connections_per_client", "must be 0 (no limit) or more, got %d", c.MaxConnectionsPerClient)
	}
	c.ShutdownGrace = DefaultShutdownGrace
	if l.ShutdownGrace != "" {
		d, err := time.ParseDuration(l.ShutdownGrace)
		if err != nil || d < 0 {
			r.at("limits.shutdown_grace", "%q is not a duration (e.g. 10s, 1m)", l.ShutdownGrace)
			return
		}
		c.ShutdownGrace = d
	}
}

// ValidateListen checks a host:port listen address.
func ValidateListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:3128)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && host != "localhost" {
			return fmt.Errorf("listen on an IP address, not %q", host)
		}
	}
	return nil
}

func (c *Config) compileNetwork(n fileNetwork, r *reporter) {
	c.compileAllowlist(n.Allowlist, r)
	for i, s := range n.AllowCIDRs {
		field := fmt.Sprintf("network.allow_cidrs[%d]", i)
		pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			r.at(field, "%q is not a CIDR (e.g. 10.20.0.0/16)", s)
			continue
		}
		if pfx != pfx.Masked() {
			r.at(field, "%q has host bits set; did you mean %q?", s, pfx.Masked().String())
			continue
		}
		if err := allowlist.ValidateAllowCIDR(pfx); err != nil {
			r.at(field, "%v", err)
			continue
		}
		c.AllowCIDRs = append(c.AllowCIDRs, pfx)
	}

	for i, s := range n.DNS.Servers {
		field := fmt.Sprintf("network.dns.servers[%d]", i)
		ap, err := parseDNSServer(s)
		if err != nil {
			r.at(field, "%v", err)
			continue
		}
		c.DNSServers = append(c.DNSServers, ap)
	}
	c.warnUnreachable(r)
}

// compileAllowlist reports every entry's problem, then (when each entry is
// fine on its own) the duplicates.
func (c *Config) compileAllowlist(entries []fileEntry, r *reporter) {
	domains := make([]string, len(entries))
	valid := true
	for i, e := range entries {
		domains[i] = e.Domain
		field := fmt.Sprintf("network.allowlist[%d].domain", i)
		if pfx, err := netip.ParsePrefix(strings.TrimSpace(e.Domain)); err == nil {
			r.at(field, "%q is an address range, not a host; the allowlist names hosts and single addresses. "+
				"To let the gateway reach addresses in a blocked range, add it to network.allow_cidrs and name the hosts here", pfx.String())
			valid = false
			continue
		}
		if _, _, err := allowlist.ParseDomain(e.Domain); err != nil {
			r.at(field, "%v", err)
			valid = false
		}
	}
	if !valid {
		return
	}
	p, err := allowlist.New(domains)
	var ee *allowlist.EntryError
	switch {
	case errors.As(err, &ee):
		r.at(fmt.Sprintf("network.allowlist[%d].domain", ee.Index), "%v", ee.Err)
	case err != nil:
		r.at("network.allowlist", "%v", err)
	}
	c.Allowlist = p
}

// warnUnreachable warns about entries naming an address (or localhost) that
// the address policy blocks: they can never be reached.
func (c *Config) warnUnreachable(r *reporter) {
	if c.Allowlist == nil {
		return
	}
	addrs, err := allowlist.NewAddrPolicy(allowlist.AddrPolicyOptions{AllowCIDRs: c.AllowCIDRs})
	if err != nil {
		return // allow_cidrs is wrong, and reported
	}
	for _, e := range c.Allowlist.Entries() {
		field := fmt.Sprintf("network.allowlist[%d].domain", e.Index)
		if allowlist.IsLocalhostName(e.Domain) {
			r.warn(field, "%s is loopback, which the gateway never dials: this entry can never be reached", e.Domain)
			continue
		}
		a, err := netip.ParseAddr(e.Domain)
		if err != nil {
			continue
		}
		class, err := addrs.Check(netip.AddrPortFrom(a, 443))
		switch {
		case err == nil:
		case class == allowlist.ClassLoopback || class == allowlist.ClassIPv4Compatible:
			r.warn(field, "%s is %s, which the gateway never dials: this entry can never be reached", e.Domain, class)
		default:
			r.warn(field, "%s is %s, which the gateway does not dial unless network.allow_cidrs re-opens it: this entry can never be reached", e.Domain, class)
		}
	}
}

func (c *Config) compileEntries(entries []fileEntry, topts transform.Options, r *reporter) {
	c.Entries = make([]Entry, len(entries))
	for i, e := range entries {
		field := fmt.Sprintf("network.allowlist[%d]", i)
		if e.Addresses != nil {
			c.Entries[i].Addresses = entryAddresses(e.Addresses, field+".addresses", r)
		}
		c.Entries[i].Ports, c.Entries[i].RawPorts = entryPorts(e, field, r)
		if e.Transform.Kind == 0 && e.Basic == nil && e.Query.Kind == 0 && e.OAuth2 == nil && e.AWSSigV4 == nil {
			if e.AllowPlaintext {
				r.at(field+".allow_plaintext", "only applies to an entry with a transform")
			}
			if e.Match != nil || e.Scope != "" {
				r.at(field+".match", "match and scope limit an entry's credentials; this entry has none (transform, basic, query, oauth2 or aws_sigv4)")
			}
			continue
		}
		if strings.TrimSpace(e.Domain) == "*" {
			r.at(field+".transform", `a transform on "*" would send its credentials to every host; name the host that needs them`)
			continue
		}
		rules, ok := compileCredentials(&e, field, topts, r)
		scope := compileScope(e.Match, e.Scope, field, r)
		if !ok {
			continue
		}
		if o := rules.OAuth2(); o != nil {
			c.checkTokenHost(o.TokenURL.Hostname(), field+".oauth2.token_url", r)
		}
		c.Entries[i].Transform, c.Entries[i].AllowPlaintext = rules, e.AllowPlaintext
		c.Entries[i].Scope = scope
	}
}

// compileCredentials compiles what an entry injects: transform headers,
// basic credentials and query parameters, into one transform.Rules.
func compileCredentials(e *fileEntry, field string, topts transform.Options, r *reporter) (*transform.Rules, bool) {
	var spec transform.Spec
	if e.Transform.Kind != 0 {
		specs, ok := headerSpecs(&e.Transform, field+".transform", r)
		if !ok {
			return nil, false
		}
		spec.Headers = specs
	}
	if e.Basic != nil {
		spec.Basic = &transform.BasicSpec{Username: e.Basic.Username, Password: e.Basic.Password, Line: lineOf(r.root, field+".basic")}
	}
	if o := e.OAuth2; o != nil {
		spec.OAuth2 = &transform.OAuth2Spec{TokenURL: o.TokenURL, ClientID: o.ClientID, ClientSecret: o.ClientSecret,
			Scopes: o.Scopes, Audience: o.Audience, Line: lineOf(r.root, field+".oauth2")}
	}
	if a := e.AWSSigV4; a != nil {
		spec.SigV4 = &transform.AWSSigV4Spec{Region: a.Region, Service: a.Service, AccessKeyID: a.AccessKeyID,
			SecretAccessKey: a.SecretAccessKey, SessionToken: a.SessionToken, Line: lineOf(r.root, field+".aws_sigv4")}
	}
	if e.Query.Kind != 0 {
		params, ok := paramSpecs(&e.Query, field+".query", r)
		if !ok {
			return nil, false
		}
		spec.Query = params
	}
	rules, err := transform.CompileSpec(spec, topts)
	var (
		se *transform.SpecError
		ce *transform.CredentialError
	)
	switch {
	case errors.As(err, &se):
		r.atLine(se.Line, field+".transform."+se.Name, "%s: %v", se.Field, se.Err)
		return nil, false
	case errors.As(err, &ce) && ce.Kind != "query":
		r.at(field+"."+ce.Kind+"."+ce.Field, "%v", ce.Err)
		return nil, false
	case errors.As(err, &ce):
		r.atLine(ce.Line, field+".query."+ce.Name, "%s: %v", ce.Field, ce.Err)
		return nil, false
	case err != nil:
		r.at(field+".transform", "%v", err)
		return nil, false
	}
	return rules, true
}

// checkTokenHost requires an oauth2 token endpoint to be on the allowlist:
// the token request goes out through the gateway's own policy.
func (c *Config) checkTokenHost(host, field string, r *reporter) {
	if c.Allowlist == nil {
		return // the allowlist is wrong, and reported
	}
	h, _, err := allowlist.NormalizeHost(host)
	if err != nil || !c.Allowlist.Decide(h).Allowed {
		r.at(field, "%s is not on the allowlist; the token request goes out through the gateway's own policy, so add an entry for it", host)
	}
}

// paramSpecs reads an entry's query: a map of parameter: value.
func paramSpecs(n *yaml.Node, field string, r *reporter) ([]transform.ParamSpec, bool) {
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		r.at(field, "query is a map of parameter: value (api_key: \"${env:API_KEY}\")")
		return nil, false
	}
	var params []transform.ParamSpec
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			r.atLine(v.Line, field+"."+k.Value, "a query parameter value is a string")
			return nil, false
		}
		params = append(params, transform.ParamSpec{Name: k.Value, Value: v.Value, Line: k.Line})
	}
	return params, true
}

// entryAddresses reads an entry's addresses: CIDRs (or single addresses)
// its hosts must resolve into.
func entryAddresses(list []string, field string, r *reporter) []netip.Prefix {
	if len(list) == 0 {
		r.at(field, "an empty list would refuse every address; remove it, or list the CIDRs the entry's hosts resolve into")
		return nil
	}
	pins := make([]netip.Prefix, 0, len(list))
	for j, s := range list {
		f := fmt.Sprintf("%s[%d]", field, j)
		text := strings.TrimSpace(s)
		pfx, err := netip.ParsePrefix(text)
		if err != nil {
			a, aerr := netip.ParseAddr(text)
			if aerr != nil || a.Zone() != "" {
				r.at(f, "%q is not a CIDR or an IP address (e.g. 203.0.113.0/24, or 203.0.113.7 for one address)", s)
				continue
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		switch {
		case pfx.Addr().Is4In6():
			r.at(f, "%q is an IPv4-mapped IPv6 range; write it in IPv4 form", s)
			continue
		case pfx != pfx.Masked():
			r.at(f, "%q has host bits set; did you mean %q?", s, pfx.Masked().String())
			continue
		}
		pins = append(pins, pfx)
	}
	return pins
}

// headerSpecs reads a transform: a map of header: value, or a list of such
// maps (merged in order; a header set twice is transform.Compile's error).
func headerSpecs(n *yaml.Node, field string, r *reporter) ([]transform.HeaderSpec, bool) {
	maps := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		maps = n.Content
	}
	var specs []transform.HeaderSpec
	for _, m := range maps {
		if m.Kind != yaml.MappingNode {
			r.at(field, "a transform is a map of header: value (Authorization: \"Bearer ${env:TOKEN}\"), or a list of such maps")
			return nil, false
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				r.atLine(v.Line, field+"."+k.Value, "a header value is a string")
				return nil, false
			}
			specs = append(specs, transform.HeaderSpec{Name: k.Value, Value: v.Value, Line: k.Line})
		}
	}
	if len(specs) == 0 {
		r.at(field, "an empty transform; remove it or name a header")
		return nil, false
	}
	return specs, true
}

// relativeTo resolves a relative path in the config against the config
// file's directory, as ${file:...} references are.
func relativeTo(dir, path string) string {
	if path == "" || dir == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

func (c *Config) compileCA(fc fileCA, dir string, r *reporter) {
	c.CACertFile, c.CAKeyFile = relativeTo(dir, fc.CertFile), relativeTo(dir, fc.KeyFile)
	switch {
	case (c.CACertFile == "") != (c.CAKeyFile == ""):
		r.at("ca", "set both cert_file and key_file (gateway ca init makes them)")
	case c.HasTransforms() && c.CACertFile == "":
		r.at("ca", "entries with a transform need the gateway's CA to intercept their TLS; run `gateway ca init --dir /etc/hookgate/ca` and set ca.cert_file and ca.key_file to the files it makes")
	}
}

func parseDNSServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%q is not an IP address or IP:port (e.g. 192.0.2.53 or [2001:db8::53]:53)", s)
}

func (c *Config) compileLog(l fileLog, r *reporter) {
	c.LogLevel = zerolog.InfoLevel
	if l.Level == "" {
		return
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(l.Level))
	if err != nil {
		r.at("log.level", "%q is not a level; use debug, info, warn or error", l.Level)
		return
	}
	c.LogLevel = lvl
}
