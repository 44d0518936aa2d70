package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hookgate/hookgate/allowlist"
	"github.com/hookgate/hookgate/transform"
)

// The file format of tenants: a shared gateway's sandboxes, each with its
// own network block and the ways its clients are recognised.
type fileTenant struct {
	Name      string          `yaml:"name"`
	Network   fileNetwork     `yaml:"network"`
	ProxyAuth []fileProxyAuth `yaml:"proxy_auth"`
	Clients   []string        `yaml:"clients"`
	// ClientCerts are the names (subject common name or DNS SAN) of the
	// client certificates that identify the tenant on a TLS proxy
	// listener (listen.proxy_tls).
	ClientCerts []string        `yaml:"client_certs"`
	Limits      fileTenantLimit `yaml:"limits"`
}

// fileTenantLimit bounds what one tenant may use of a shared gateway.
type fileTenantLimit struct {
	MaxConnections    int     `yaml:"max_connections"`
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	Burst             int     `yaml:"burst"`
	BytesPerMinute    int64   `yaml:"bytes_per_minute"`
}

// fileProxyAuth is one credential a tenant's clients present in
// Proxy-Authorization: type basic (user and password, or user and the
// password's sha256) or bearer (token, or the token's sha256).
type fileProxyAuth struct {
	Type     string `yaml:"type"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	Token    string `yaml:"token"`
	SHA256   string `yaml:"sha256"`
}

type fileAuth struct {
	Required bool `yaml:"required"`
}

// Kinds of proxy credential.
const (
	CredentialBasic  = "basic"
	CredentialBearer = "bearer"
)

// TenantConfig is one compiled entry of tenants: its name, its own network
// block (compiled like the top-level one) and how its clients are known.
type TenantConfig struct {
	Name       string
	Allowlist  *allowlist.Policy
	AllowCIDRs []netip.Prefix
	Entries    []Entry
	// Mode is the tenant's network.mode (enforce or report); "" takes the
	// top-level one.
	Mode string
	// Credentials are checked against Proxy-Authorization.
	Credentials []Credential
	// Clients are the source ranges of its clients.
	Clients []netip.Prefix
	// ClientCerts are the client certificate names that identify it.
	ClientCerts []string
	// Limits bound its use of the gateway; zero fields are no limit.
	Limits TenantLimits
}

// TenantLimits bound what one tenant may use of a shared gateway. A zero
// field is no limit.
type TenantLimits struct {
	// MaxConnections caps its tunnels and forwarded requests open at once.
	MaxConnections int
	// RequestsPerSecond and Burst are a token bucket over its requests
	// and tunnels; Burst defaults to RequestsPerSecond rounded up.
	RequestsPerSecond float64
	Burst             int
	// BytesPerMinute caps the bytes its clients send and receive in each
	// minute: a cap on volume, against exfiltration.
	BytesPerMinute int64
}

// Credential is one proxy credential of a tenant. It holds only the SHA-256
// of the secret; printing it shows its kind and user.
type Credential struct {
	Kind   string // CredentialBasic or CredentialBearer
	User   string // basic only
	digest [sha256.Size]byte
}

func (c Credential) String() string {
	if c.Kind == CredentialBasic {
		return "basic user " + c.User
	}
	return c.Kind
}

// maxTenantName bounds a tenant's name, which becomes a metric label.
const maxTenantName = 63

var tenantNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

func (c *Config) compileTenants(list []fileTenant, auth fileAuth, topts transform.Options, r *reporter) {
	c.AuthRequired = auth.Required
	if auth.Required && len(list) == 0 {
		r.at("auth.required", "no tenants are configured, so every client would be refused; add tenants or remove auth.required")
	}
	seen := map[string]int{}
	for i, ft := range list {
		sub := &reporter{file: r.file, root: tenantNode(r.root, i), errs: r.errs, bad: r.bad, prefix: fmt.Sprintf("tenants[%d].", i)}
		t := compileTenant(ft, topts, sub)
		r.warnings = append(r.warnings, sub.warnings...)
		if first, dup := seen[t.Name]; dup && t.Name != "" {
			sub.at("name", "%q is also the name of tenants[%d]; names must be distinct", t.Name, first)
		}
		seen[t.Name] = i
		c.Tenants = append(c.Tenants, t)
	}
	checkTenantOverlaps(c.Tenants, r)
}

// compileTenant reads one tenant; its problems are reported under its own
// prefix.
func compileTenant(ft fileTenant, topts transform.Options, r *reporter) TenantConfig {
	name := strings.TrimSpace(ft.Name)
	switch {
	case name == "":
		r.at("name", "every tenant needs a name (it is in every decision line and metric)")
	case len(name) > maxTenantName || !tenantNameRE.MatchString(name):
		r.at("name", "%q is not a tenant name: use lower-case letters, digits, '.', '_' and '-', at most %d characters, starting with a letter or digit", name, maxTenantName)
	}
	if len(ft.Network.DNS.Servers) > 0 || ft.Network.DNS.Denied != "" {
		r.at("network.dns", "DNS is the gateway's, not a tenant's; set network.dns at the top level")
	}
	sub := &Config{}
	sub.compileNetwork(ft.Network, r)
	sub.compileEntries(ft.Network.Allowlist, topts, r)
	sub.compileTimeouts(fileTimeouts{}, ft.Network.Allowlist, r)
	if ft.Network.Mode != "" {
		sub.compileMode(ft.Network.Mode, r)
	}
	t := TenantConfig{Name: name, Allowlist: sub.Allowlist, AllowCIDRs: sub.AllowCIDRs, Entries: sub.Entries, Mode: sub.Mode, Limits: compileTenantLimits(ft.Limits, r)}
	for i, fa := range ft.ProxyAuth {
		if cred, ok := compileCredential(fa, fmt.Sprintf("proxy_auth[%d]", i), topts, r); ok {
			t.Credentials = append(t.Credentials, cred)
		}
	}
	for i, s := range ft.Clients {
		field := fmt.Sprintf("clients[%d]", i)
		pfx, err := parsePrefixOrAddr(s)
		switch {
		case err != nil:
			r.at(field, "%q is not a CIDR or an IP address (e.g. 10.20.0.0/24)", s)
		case pfx != pfx.Masked():
			r.at(field, "%q has host bits set; did you mean %q?", s, pfx.Masked().String())
		default:
			t.Clients = append(t.Clients, pfx)
		}
	}
	for i, n := range ft.ClientCerts {
		if n = strings.TrimSpace(n); n == "" {
			r.at(fmt.Sprintf("client_certs[%d]", i), "an empty certificate name")
			continue
		}
		t.ClientCerts = append(t.ClientCerts, n)
	}
	if len(ft.ProxyAuth) == 0 && len(ft.Clients) == 0 && len(ft.ClientCerts) == 0 {
		r.at("name", "tenant %q has no way to be recognised; give it proxy_auth, clients or client_certs", name)
	}
	return t
}

func compileTenantLimits(fl fileTenantLimit, r *reporter) TenantLimits {
	l := TenantLimits(fl)
	if l.MaxConnections < 0 {
		r.at("limits.max_connections", "must be 0 (no limit) or more, got %d", l.MaxConnections)
	}
	if l.RequestsPerSecond < 0 || l.RequestsPerSecond > 1e9 {
		r.at("limits.requests_per_second", "must be from 0 (no limit) to 1e9, got %g", l.RequestsPerSecond)
	}
	if l.Burst < 0 || (l.Burst > 0 && l.RequestsPerSecond == 0) {
		r.at("limits.burst", "must be 0 or more, and only with requests_per_second")
	}
	if l.Burst == 0 && l.RequestsPerSecond > 0 {
		l.Burst = int(math.Ceil(l.RequestsPerSecond))
	}
	if l.BytesPerMinute < 0 {
		r.at("limits.bytes_per_minute", "must be 0 (no limit) or more, got %d", l.BytesPerMinute)
	}
	return l
}

// parsePrefixOrAddr reads a CIDR, or one address as its own /32 or /128.
func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if pfx, err := netip.ParsePrefix(s); err == nil {
		if pfx.Addr().Is4In6() || pfx.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("write IPv4 ranges in IPv4 form")
		}
		return pfx, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("not an address")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// compileCredential reads one proxy_auth item: a secret from a reference
// (kept only as its SHA-256) or the SHA-256 itself.
func compileCredential(fa fileProxyAuth, field string, topts transform.Options, r *reporter) (Credential, bool) {
	cred := Credential{Kind: strings.ToLower(strings.TrimSpace(fa.Type))}
	secretField, written := "", ""
	switch cred.Kind {
	case CredentialBasic:
		cred.User = fa.User
		if fa.User == "" {
			r.at(field+".user", "a basic credential needs a user (the tenant or sandbox id clients put before the ':')")
			return cred, false
		}
		if strings.ContainsAny(fa.User, ":\x00\r\n") {
			r.at(field+".user", "a user name cannot contain ':' or control characters (Basic splits user and password at the first ':')")
			return cred, false
		}
		if fa.Token != "" {
			r.at(field+".token", "a basic credential has a password, not a token")
			return cred, false
		}
		secretField, written = "password", fa.Password
	case CredentialBearer:
		if fa.User != "" || fa.Password != "" {
			r.at(field+".type", "a bearer credential has a token only (no user or password)")
			return cred, false
		}
		secretField, written = "token", fa.Token
	default:
		r.at(field+".type", "%q is not a credential type; use basic or bearer", fa.Type)
		return cred, false
	}
	switch {
	case written != "" && fa.SHA256 != "":
		r.at(field+".sha256", "give the %s or its sha256, not both", secretField)
		return cred, false
	case fa.SHA256 != "":
		b, err := hex.DecodeString(strings.TrimSpace(fa.SHA256))
		if err != nil || len(b) != sha256.Size {
			r.at(field+".sha256", "not a SHA-256 in hex (64 hex digits; e.g. printf %%s \"$SECRET\" | sha256sum)")
			return cred, false
		}
		copy(cred.digest[:], b)
		return cred, true
	case written == "":
		r.at(field+"."+secretField, "missing; give it as ${file:PATH} or ${env:NAME}, or give its sha256")
		return cred, false
	}
	secret, err := transform.ResolveSecret(written, topts)
	if err != nil {
		r.at(field+"."+secretField, "%v", err)
		return cred, false
	}
	cred.digest = sha256.Sum256([]byte(secret.Reveal()))
	return cred, true
}

// tenantNode is the node of tenants[i], for the lines of its problems.
func tenantNode(root *yaml.Node, i int) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if list := mappingValue(n, "tenants"); list != nil && list.Kind == yaml.SequenceNode && i < len(list.Content) {
		return list.Content[i]
	}
	return n
}

// checkTenantOverlaps refuses what would make a client's tenant ambiguous:
// the same basic user, the same bearer token, or overlapping client ranges
// in two tenants.
func checkTenantOverlaps(ts []TenantConfig, r *reporter) {
	certs := map[string]int{}
	for i, t := range ts {
		for j, n := range t.ClientCerts {
			if first, dup := certs[n]; dup && first != i {
				r.at(fmt.Sprintf("tenants[%d].client_certs[%d]", i, j), "%q also names tenants[%d]; a certificate names one tenant", n, first)
			}
			certs[n] = i
		}
	}
	users := map[string]int{}
	tokens := map[[sha256.Size]byte]int{}
	for i, t := range ts {
		for j, cred := range t.Credentials {
			field := fmt.Sprintf("tenants[%d].proxy_auth[%d]", i, j)
			switch cred.Kind {
			case CredentialBasic:
				if first, dup := users[cred.User]; dup {
					r.at(field+".user", "user %q is also a user of tenants[%d]; a basic user names one tenant", cred.User, first)
				}
				users[cred.User] = i
			case CredentialBearer:
				if first, dup := tokens[cred.digest]; dup {
					r.at(field, "the same token is also a credential of tenants[%d]; a token names one tenant", first)
				}
				tokens[cred.digest] = i
			}
		}
	}
	type owned struct {
		pfx    netip.Prefix
		tenant int
	}
	var ranges []owned
	for i, t := range ts {
		for j, pfx := range t.Clients {
			for _, o := range ranges {
				if o.tenant != i && o.pfx.Overlaps(pfx) {
					r.at(fmt.Sprintf("tenants[%d].clients[%d]", i, j), "%s overlaps %s of tenants[%d]; a client address names one tenant", pfx, o.pfx, o.tenant)
				}
			}
			ranges = append(ranges, owned{pfx, i})
		}
	}
}

// Tenants is the tenant table of a policy generation: each tenant's own
// compiled policy, and the indexes that find a client's tenant. It is
// immutable, like the Policy that holds it.
type Tenants struct {
	// Required: a client no tenant claims is refused.
	Required bool
	list     []*Tenant
	byName   map[string]*Tenant
	basic    map[string]basicCred
	bearer   map[[sha256.Size]byte]*Tenant
	// clients holds the client ranges by prefix length, longest first:
	// a lookup costs one map probe per distinct length, however many
	// tenants there are. Ranges never overlap (checked at load).
	clients []clientRanges
	certs   map[string]*Tenant
}

type clientRanges struct {
	bits   int
	is4    bool
	ranges map[netip.Prefix]*Tenant
}

// Tenant is one tenant of a generation: its name and its own policy.
type Tenant struct {
	Name   string
	Policy *Policy
	// Config is what the tenant was compiled from (for gateway check).
	Config *TenantConfig
}

type basicCred struct {
	digest [sha256.Size]byte
	tenant *Tenant
}

// tenantPolicies compiles every tenant's policy on the same host facts as
// the top-level one; nil when c has no tenants.
func (c *Config) tenantPolicies(o PolicyOptions) (*Tenants, error) {
	if len(c.Tenants) == 0 {
		return nil, nil
	}
	ts := &Tenants{
		Required: c.AuthRequired,
		byName:   make(map[string]*Tenant, len(c.Tenants)),
		basic:    map[string]basicCred{},
		bearer:   map[[sha256.Size]byte]*Tenant{},
		certs:    map[string]*Tenant{},
	}
	for i := range c.Tenants {
		tc := &c.Tenants[i]
		sub := &Config{Allowlist: tc.Allowlist, AllowCIDRs: tc.AllowCIDRs, Entries: tc.Entries, Timeouts: c.Timeouts, DNSDenied: c.DNSDenied, Mode: tc.Mode}
		if sub.Mode == "" {
			sub.Mode = c.Mode
		}
		p, err := sub.Policy(o)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tc.Name, err)
		}
		t := &Tenant{Name: tc.Name, Policy: p, Config: tc}
		ts.list = append(ts.list, t)
		ts.byName[t.Name] = t
		for _, cred := range tc.Credentials {
			switch cred.Kind {
			case CredentialBasic:
				ts.basic[cred.User] = basicCred{digest: cred.digest, tenant: t}
			case CredentialBearer:
				ts.bearer[cred.digest] = t
			}
		}
		for _, n := range tc.ClientCerts {
			ts.certs[n] = t
		}
		for _, pfx := range tc.Clients {
			ts.addClients(pfx, t)
		}
	}
	return ts, nil
}

// Names are the tenants' names, in config order: the only values of the
// tenant label of the metrics.
func (ts *Tenants) Names() []string {
	if ts == nil {
		return nil
	}
	names := make([]string, len(ts.list))
	for i, t := range ts.list {
		names[i] = t.Name
	}
	return names
}

// List is every tenant, in config order. The caller must not modify it.
func (ts *Tenants) List() []*Tenant {
	if ts == nil {
		return nil
	}
	return ts.list
}

// ByName finds a tenant by its name (a client certificate's identity).
func (ts *Tenants) ByName(name string) (*Tenant, bool) {
	if ts == nil {
		return nil, false
	}
	t, ok := ts.byName[name]
	return t, ok
}

// ByCert finds the tenant of a verified client certificate by the names
// it holds: its subject common name, then its DNS names.
func (ts *Tenants) ByCert(commonName string, dnsNames []string) (*Tenant, bool) {
	if ts == nil {
		return nil, false
	}
	if t, ok := ts.certs[commonName]; ok && commonName != "" {
		return t, true
	}
	for _, n := range dnsNames {
		if t, ok := ts.certs[n]; ok {
			return t, true
		}
	}
	return nil, false
}

// Basic finds the tenant of a basic user and checks the password, in
// constant time with respect to the password.
func (ts *Tenants) Basic(user, password string) (*Tenant, bool) {
	if ts == nil {
		return nil, false
	}
	got := sha256.Sum256([]byte(password))
	bc, ok := ts.basic[user]
	if !ok {
		// The same work as a known user, so that timing does not tell
		// users apart from non-users.
		var none [sha256.Size]byte
		subtle.ConstantTimeCompare(got[:], none[:])
		return nil, false
	}
	if subtle.ConstantTimeCompare(got[:], bc.digest[:]) != 1 {
		return nil, false
	}
	return bc.tenant, true
}

// Bearer finds the tenant of a bearer token. The token is looked up by its
// SHA-256, so that the lookup's timing says nothing about the token.
func (ts *Tenants) Bearer(token string) (*Tenant, bool) {
	if ts == nil {
		return nil, false
	}
	got := sha256.Sum256([]byte(token))
	t, ok := ts.bearer[got]
	return t, ok
}

// ByClient finds the tenant whose client ranges hold a.
func (ts *Tenants) ByClient(a netip.Addr) (*Tenant, bool) {
	if ts == nil || !a.IsValid() {
		return nil, false
	}
	a = a.Unmap()
	for _, cr := range ts.clients {
		if cr.is4 != a.Is4() {
			continue
		}
		pfx, err := a.Prefix(cr.bits)
		if err != nil {
			continue
		}
		if t, ok := cr.ranges[pfx]; ok {
			return t, true
		}
	}
	return nil, false
}

// addClients indexes a client range of t.
func (ts *Tenants) addClients(pfx netip.Prefix, t *Tenant) {
	is4 := pfx.Addr().Is4()
	i := slices.IndexFunc(ts.clients, func(cr clientRanges) bool { return cr.bits == pfx.Bits() && cr.is4 == is4 })
	if i < 0 {
		ts.clients = append(ts.clients, clientRanges{bits: pfx.Bits(), is4: is4, ranges: map[netip.Prefix]*Tenant{}})
		slices.SortFunc(ts.clients, func(a, b clientRanges) int { return b.bits - a.bits })
		i = slices.IndexFunc(ts.clients, func(cr clientRanges) bool { return cr.bits == pfx.Bits() && cr.is4 == is4 })
	}
	ts.clients[i].ranges[pfx] = t
}

// ForClient is the policy of a client known only by its address (a
// transparent connection, a DNS query): its tenant's, by client range,
// with the tenant's name; else p itself and "". A nil Policy stays nil.
func (p *Policy) ForClient(a netip.Addr) (*Policy, string) {
	if p == nil {
		return nil, ""
	}
	if t, ok := p.Tenants.ByClient(a); ok {
		return t.Policy, t.Name
	}
	return p, ""
}

// ProxyTLS is listen.proxy_tls: the explicit listener speaks TLS with
// CertFile and KeyFile, and asks every client for a certificate that
// ClientCAFile's CAs issued; the certificate's name selects the tenant
// (tenants[].client_certs). Read at start only.
type ProxyTLS struct {
	CertFile, KeyFile, ClientCAFile string
}

func (c *Config) compileProxyTLS(f fileProxyTLS, dir string, r *reporter) {
	if f == (fileProxyTLS{}) {
		return
	}
	if f.CertFile == "" || f.KeyFile == "" || f.ClientCAFile == "" {
		r.at("listen.proxy_tls", "set cert_file, key_file and client_ca_file (the CA that issues the sandboxes' client certificates)")
		return
	}
	c.ProxyTLS = &ProxyTLS{CertFile: relativeTo(dir, f.CertFile), KeyFile: relativeTo(dir, f.KeyFile), ClientCAFile: relativeTo(dir, f.ClientCAFile)}
}

// Intercepts reports whether the policy, or any of its tenants' policies,
// injects credentials into requests to host (and so intercepts its TLS).
func (p *Policy) Intercepts(host string) bool {
	if v := p.Decide(host); v.Allowed && v.Entry.Transform != nil {
		return true
	}
	for _, t := range p.Tenants.List() {
		if v := t.Policy.Decide(host); v.Allowed && v.Entry.Transform != nil {
			return true
		}
	}
	return false
}
