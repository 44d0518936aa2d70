package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// CodeUpstreamCredential answers a request whose entry's credential could
// not be obtained (an OAuth2 token endpoint that failed): nothing is sent.
const CodeUpstreamCredential Code = "upstream-credential-error"

// tokenFetchTimeout bounds one token request, connection included.
const tokenFetchTimeout = 30 * time.Second

// tokenCache holds one token source per oauth2 credential of the policy in
// force (keyed by the credential; a reload starts afresh). The zero value
// is ready.
type tokenCache struct {
	mu      sync.Mutex
	gen     *config.Policy // the policy the sources were made under
	sources map[*transform.OAuth2]*entryToken
}

// entryToken is the token of one oauth2 credential. src caches the token
// until shortly before it expires (oauth2.ReuseTokenSource: ten seconds) and
// holds a lock while it refreshes, so that concurrent requests wait for one
// refresh rather than each asking the token endpoint.
type entryToken struct {
	src oauth2.TokenSource

	mu    sync.Mutex
	token string // the last token handed out, and its scrubber
	scrub *transform.Scrubber
}

// token returns the access token of the entry's oauth2 credential and the
// scrubber of the entry's secrets with that token; a *denial when the token
// cannot be had.
func (s *Server) token(ex *exchange) (string, *transform.Scrubber, *denial) {
	rules := ex.entry.Transform
	cred := rules.OAuth2()
	et := s.tokens.source(cred, s)
	tok, err := et.src.Token()
	if err != nil {
		return "", nil, tokenDenial(err, ex.host, cred.TokenURL.Hostname())
	}
	et.mu.Lock()
	defer et.mu.Unlock()
	if tok.AccessToken != et.token {
		et.token, et.scrub = tok.AccessToken, rules.ScrubberWith(tok.AccessToken, "Bearer "+tok.AccessToken)
	}
	return et.token, et.scrub, nil
}

// source returns (making it once) the token source of cred.
func (c *tokenCache) source(cred *transform.OAuth2, s *Server) *entryToken {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := s.policy.Load(); p != c.gen {
		// A reload compiled new credentials: the old sources (and their
		// tokens) go, so that the cache holds one generation's.
		c.gen, c.sources = p, nil
	}
	if et, ok := c.sources[cred]; ok {
		return et
	}
	if c.sources == nil {
		c.sources = map[*transform.OAuth2]*entryToken{}
	}
	cfg := clientcredentials.Config{
		ClientID:     cred.ClientID.Reveal(),
		ClientSecret: cred.ClientSecret.Reveal(),
		TokenURL:     cred.TokenURL.String(),
		Scopes:       cred.Scopes,
		AuthStyle:    oauth2.AuthStyleInHeader,
	}
	if cred.Audience != "" {
		cfg.EndpointParams = url.Values{"audience": {cred.Audience}}
	}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, s.tokenClient())
	et := &entryToken{src: cfg.TokenSource(ctx)}
	c.sources[cred] = et
	return et
}

// tokenClient is the HTTP client token requests go out with: through the
// policy in force, like any request of the sandbox's (the token endpoint's
// host must be on the allowlist, and its addresses pass the guard), over
// TLS verified against the upstream roots, bounded in time.
func (s *Server) tokenClient() *http.Client {
	tr := &http.Transport{
		DialContext:         s.dialByPolicy,
		TLSClientConfig:     &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: s.timeouts.TLSHandshake,
		MaxIdleConns:        4,
		IdleConnTimeout:     time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: tokenFetchTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// dialByPolicy dials addr as a request of the sandbox's would be: the host
// judged by the policy in force, its addresses by the guard of its entry.
func (s *Server) dialByPolicy(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	t, den := parseTarget(host, port, 443)
	if den != nil {
		return nil, den
	}
	p := s.policy.Load()
	v, _, err := p.Judge(ctx, t.host, t.ip, t.port, nil)
	if err != nil {
		return nil, err
	}
	g := s.guardFor(p, v.Entry, s.timeoutsFor(p, v.Entry))
	return g.DialContext(ctx, network, addr)
}

// tokenDenial is the answer to a request whose token could not be had. The
// reason names the class of the failure, never the token endpoint's answer
// (which may quote what it was sent).
func tokenDenial(err error, host, tokenHost string) *denial {
	var (
		re  *oauth2.RetrieveError
		cls string
	)
	if errors.As(err, &re) && re.Response != nil {
		cls = fmt.Sprintf("the token endpoint answered %d", re.Response.StatusCode)
	} else {
		cls = classifyUpstream(err, tokenHost).reason
	}
	return deny(CodeUpstreamCredential, http.StatusBadGateway, host,
		"no OAuth2 token for %s from %s: %s; nothing was sent", host, tokenHost, cls)
}

// fetchCredential obtains the run-time credential of the exchange's entry
// (an OAuth2 token) before anything is sent; nil when there is none to get
// or the request is outside the entry's scope.
func (s *Server) fetchCredential(ex *exchange) *denial {
	if ex.bare || ex.entry == nil || ex.entry.Transform.OAuth2() == nil {
		return nil
	}
	tok, scrub, den := s.token(ex)
	if den != nil {
		return den
	}
	ex.token, ex.scrub = tok, scrub
	return nil
}
