package proxy

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hookgate/hookgate/config"
)

// Codes of client identification (a gateway with tenants).
const (
	// CodeProxyAuthRequired: the client named no tenant, or named one with
	// credentials that are wrong; 407 with Proxy-Authenticate.
	CodeProxyAuthRequired Code = "proxy-auth-required"
	// CodeProxyAuthRateLimited: the client's address failed to
	// authenticate too often of late; 429 until its budget refills.
	CodeProxyAuthRateLimited Code = "proxy-auth-rate-limited"
)

// realm is the protection space named in Proxy-Authenticate.
const realm = `realm="hookgate"`

// proxyAuthChallenges are the schemes a 407 offers.
var proxyAuthChallenges = []string{`Basic ` + realm + `, charset="UTF-8"`, `Bearer ` + realm}

// identity is who a request or connection was recognised as: the tenant
// (empty for a gateway without tenants, or a client none claims) and the
// policy it is judged by.
type identity struct {
	tenant string
	policy *config.Policy
	limits config.TenantLimits
}

// identityOf is the identity of a tenant of the current generation.
func identityOf(t *config.Tenant) identity {
	id := identity{tenant: t.Name, policy: t.Policy}
	if t.Config != nil {
		id.limits = t.Config.Limits
	}
	return id
}

// identify selects the policy of an explicit request (a CONNECT, or an
// absolute-form request) from the current generation: the tenant its
// client certificate names (a TLS listener), else the tenant its
// Proxy-Authorization names, else the tenant of its source address, else the top-level
// policy, unless tenants are required. Proxy-Authorization is removed from
// the request, whatever it said: it is for the gateway alone.
func (s *Server) identify(r *http.Request) (identity, *denial) {
	gen := s.policy.Load()
	values := r.Header.Values("Proxy-Authorization")
	r.Header.Del("Proxy-Authorization")
	ts := gen.Tenants
	if ts == nil {
		return identity{policy: gen}, nil
	}
	if transparent, _ := r.Context().Value(transparentKey{}).(bool); transparent {
		return identifyAddr(gen, clientIP(r.RemoteAddr))
	}
	client := clientIP(r.RemoteAddr)
	// A verified client certificate is the strongest identity there is: it
	// wins over any header.
	if t, ok := tenantOfCert(ts, r); ok {
		return identityOf(t), nil
	}
	if len(values) > 0 {
		return s.identifyCredentials(ts, client, values)
	}
	if t, ok := ts.ByClient(client); ok {
		return identityOf(t), nil
	}
	if ts.Required {
		return identity{}, proxyAuthRequired("this gateway serves identified clients only: send Proxy-Authorization (e.g. HTTPS_PROXY=http://user:password@gateway:3128)")
	}
	return identity{policy: gen}, nil
}

// identifyCredentials checks the Proxy-Authorization a client sent. A
// wrong credential is refused even when tenants are not required: the
// client meant to be someone, and is not let through as no one.
func (s *Server) identifyCredentials(ts *config.Tenants, client netip.Addr, values []string) (identity, *denial) {
	if !s.authFailures.allowed(client, time.Now()) {
		return identity{}, deny(CodeProxyAuthRateLimited, http.StatusTooManyRequests, "",
			"too many failed proxy authentications from this address; retry later")
	}
	if len(values) != 1 {
		s.authFailures.fail(client, time.Now())
		return identity{}, proxyAuthRequired("send one Proxy-Authorization header, not %d", len(values))
	}
	cred, err := parseProxyAuthorization(values[0])
	if err != nil {
		s.authFailures.fail(client, time.Now())
		return identity{}, proxyAuthRequired("the Proxy-Authorization header cannot be read: %v", err)
	}
	var t *config.Tenant
	var ok bool
	switch cred.scheme {
	case config.CredentialBasic:
		t, ok = ts.Basic(cred.user, cred.secret)
	case config.CredentialBearer:
		t, ok = ts.Bearer(cred.secret)
	}
	if !ok {
		s.authFailures.fail(client, time.Now())
		return identity{}, proxyAuthRequired("the proxy credentials are not valid")
	}
	return identityOf(t), nil
}

// identifyAddr selects the policy of a transparent connection by its
// source address. A client no tenant claims, where tenants are required,
// is refused as a host off its allowlist would be: it has none.
func identifyAddr(gen *config.Policy, client netip.Addr) (identity, *denial) {
	ts := gen.Tenants
	if ts == nil {
		return identity{policy: gen}, nil
	}
	if t, ok := ts.ByClient(client); ok {
		return identityOf(t), nil
	}
	if ts.Required {
		return identity{}, deny(CodeAllowlist, http.StatusForbidden, "", "this address belongs to no tenant of the gateway, so nothing is allowed")
	}
	return identity{policy: gen}, nil
}

func proxyAuthRequired(format string, args ...any) *denial {
	return deny(CodeProxyAuthRequired, http.StatusProxyAuthRequired, "", format, args...)
}

// clientIP is the address of a "host:port" remote address; the zero Addr
// when it is not one.
func clientIP(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// proxyCredential is a parsed Proxy-Authorization: the scheme
// (config.CredentialBasic or config.CredentialBearer), the basic user, and
// the password or token.
type proxyCredential struct {
	scheme string
	user   string
	secret string
}

// maxProxyAuthorization bounds the header value read.
const maxProxyAuthorization = 4096

// Errors of parseProxyAuthorization. They never carry the header's bytes.
var (
	errAuthTooLong    = errors.New("longer than 4096 bytes")
	errAuthNoScheme   = errors.New(`want "Basic <base64 of user:password>" or "Bearer <token>"`)
	errAuthScheme     = errors.New("only the Basic and Bearer schemes are accepted")
	errAuthBase64     = errors.New("the Basic credentials are not base64")
	errAuthNoColon    = errors.New("the Basic credentials have no ':' between user and password")
	errAuthEmpty      = errors.New("the user, password or token is empty")
	errAuthControl    = errors.New("the credentials contain control characters")
	errAuthBadToken68 = errors.New("the Bearer token has characters a token cannot have")
)

// parseProxyAuthorization reads a Proxy-Authorization value (RFC 9110
// §11.6.2): "Basic base64(user:password)" (RFC 7617; the user ends at the
// first ':', the password may hold more; both are bytes, UTF-8 by the
// charset the challenge names) or "Bearer token68" (RFC 6750). Scheme names
// are case-insensitive; surrounding white space is ignored.
func parseProxyAuthorization(v string) (proxyCredential, error) {
	if len(v) > maxProxyAuthorization {
		return proxyCredential{}, errAuthTooLong
	}
	v = strings.Trim(v, " \t")
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok {
		return proxyCredential{}, errAuthNoScheme
	}
	rest = strings.Trim(rest, " \t")
	if rest == "" {
		return proxyCredential{}, errAuthEmpty
	}
	switch {
	case strings.EqualFold(scheme, "basic"):
		return parseBasic(rest)
	case strings.EqualFold(scheme, "bearer"):
		if !isToken68(rest) {
			return proxyCredential{}, errAuthBadToken68
		}
		return proxyCredential{scheme: config.CredentialBearer, secret: rest}, nil
	}
	return proxyCredential{}, errAuthScheme
}

func parseBasic(b64 string) (proxyCredential, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		// Some clients leave the padding off.
		if raw, err = base64.RawStdEncoding.DecodeString(b64); err != nil {
			return proxyCredential{}, errAuthBase64
		}
	}
	user, password, ok := strings.Cut(string(raw), ":")
	switch {
	case !ok:
		return proxyCredential{}, errAuthNoColon
	case user == "" || password == "":
		return proxyCredential{}, errAuthEmpty
	case hasControl(user) || hasControl(password):
		return proxyCredential{}, errAuthControl
	}
	return proxyCredential{scheme: config.CredentialBasic, user: user, secret: password}, nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// isToken68 reports whether s is a token68: letters, digits, "-._~+/",
// then '=' padding only.
func isToken68(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			break
		}
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// Failed authentications a client address may make: a burst of
// authBurst, then one per authRefill.
const (
	authBurst  = 10
	authRefill = 6 * time.Second
	// maxAuthClients bounds the addresses remembered; beyond it, those
	// whose budget has refilled are forgotten first.
	maxAuthClients = 1 << 16
)

// authLimiter counts the failed proxy authentications of each client
// address (a token bucket each), so that credentials cannot be guessed at
// the gateway's speed.
type authLimiter struct {
	mu sync.Mutex
	m  map[netip.Addr]*authBucket
}

type authBucket struct {
	tokens float64
	last   time.Time
}

func (b *authBucket) refill(now time.Time) {
	b.tokens = min(authBurst, b.tokens+float64(now.Sub(b.last))/float64(authRefill))
	b.last = now
}

// allowed reports whether a may try to authenticate now.
func (l *authLimiter) allowed(a netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[a]
	if !ok {
		return true
	}
	b.refill(now)
	return b.tokens >= 1
}

// fail spends one of a's attempts.
func (l *authLimiter) fail(a netip.Addr, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[netip.Addr]*authBucket)
	}
	b, ok := l.m[a]
	if !ok {
		if len(l.m) >= maxAuthClients {
			l.forgetRefilled(now)
		}
		b = &authBucket{tokens: authBurst, last: now}
		l.m[a] = b
	}
	b.refill(now)
	b.tokens = max(0, b.tokens-1)
}

// forgetRefilled drops the addresses whose budget is full again; if none
// is, it forgets them all rather than grow without bound.
func (l *authLimiter) forgetRefilled(now time.Time) {
	for a, b := range l.m {
		if b.refill(now); b.tokens >= authBurst {
			delete(l.m, a)
		}
	}
	if len(l.m) >= maxAuthClients {
		clear(l.m)
	}
}

// tenantOfCert is the tenant a verified client certificate names; false
// when the connection has none.
func tenantOfCert(ts *config.Tenants, r *http.Request) (*config.Tenant, bool) {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return nil, false
	}
	tc, ok := layerOf[*tls.Conn](c)
	if !ok {
		return nil, false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil, false
	}
	leaf := st.VerifiedChains[0][0]
	return ts.ByCert(leaf.Subject.CommonName, leaf.DNSNames)
}
