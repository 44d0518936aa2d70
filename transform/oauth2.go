package transform

import (
	"fmt"
	"net/url"
	"strings"
)

// OAuth2Spec is an entry's oauth2: a client-credentials grant whose access
// token is sent as Authorization: Bearer. ClientID and ClientSecret take
// references; the token URL, scopes and audience are configuration.
type OAuth2Spec struct {
	TokenURL     string
	ClientID     string
	ClientSecret string
	Scopes       []string
	Audience     string
	Line         int
}

// OAuth2 is a compiled oauth2 credential: what a token request needs. The
// package never requests a token (it does no network I/O); the proxy does,
// through its own policy. Printing an OAuth2 shows the token URL only.
type OAuth2 struct {
	TokenURL     *url.URL
	ClientID     Secret
	ClientSecret Secret
	Scopes       []string
	Audience     string
}

// String names the token endpoint, never the client's credentials.
func (o *OAuth2) String() string {
	if o == nil {
		return "transform.OAuth2(nil)"
	}
	return "transform.OAuth2(" + o.TokenURL.Redacted() + ")"
}

// Format prints String for every verb.
func (o *OAuth2) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(o.String())) }

// OAuth2 returns the entry's oauth2 credential; nil when it has none.
func (r *Rules) OAuth2() *OAuth2 {
	if r == nil {
		return nil
	}
	return r.oauth2
}

// addOAuth2 compiles an oauth2 credential. The token URL must be https (the
// client secret travels in it), without userinfo or fragment. Its secrets
// are the resolved parts of the client id and secret.
func (r *Rules) addOAuth2(o OAuth2Spec, opts Options, out *added) error {
	fail := func(field string, err error) error {
		return &CredentialError{Kind: "oauth2", Name: field, Line: o.Line, Field: field, Err: err}
	}
	for _, h := range r.headers {
		if SameHeaderName(h.name, "Authorization") {
			return fail("token_url", fmt.Errorf("%w: oauth2 sets Authorization, which the transform or basic sets too", ErrDuplicate))
		}
	}
	u, err := url.Parse(o.TokenURL)
	switch {
	case err != nil || u.Host == "":
		return fail("token_url", fmt.Errorf("%w: %q is not an absolute URL", ErrInvalidValue, o.TokenURL))
	case u.Scheme != "https":
		return fail("token_url", fmt.Errorf("%w: the token URL must be https (the client secret is sent to it)", ErrInvalidValue))
	case u.User != nil || u.Fragment != "":
		return fail("token_url", fmt.Errorf("%w: the token URL may not hold userinfo or a fragment", ErrInvalidValue))
	}
	id, err := resolve(o.ClientID, opts)
	if err != nil {
		return fail("client_id", err)
	}
	secret, err := resolve(o.ClientSecret, opts)
	if err != nil {
		return fail("client_secret", err)
	}
	for _, s := range o.Scopes {
		if s == "" || strings.ContainsAny(s, " \t") || indexCTL(s) >= 0 {
			return fail("scopes", fmt.Errorf("%w: a scope is one non-empty token", ErrInvalidValue))
		}
	}
	r.oauth2 = &OAuth2{TokenURL: u, ClientID: newSecret(id.value), ClientSecret: newSecret(secret.value),
		Scopes: append([]string(nil), o.Scopes...), Audience: o.Audience}
	for _, res := range []resolution{id, secret} {
		if len(res.parts) > 0 {
			out.secrets = append(out.secrets, res.parts...)
			out.secrets = append(out.secrets, res.value)
		}
		out.envNames = append(out.envNames, res.envNames...)
	}
	return nil
}

// ScrubberWith returns a scrubber for r's secrets and extra ones (a token
// fetched at run time), or nil when there are none. It builds a new
// scrubber: callers cache it per token.
func (r *Rules) ScrubberWith(extra ...string) *Scrubber {
	var all []string
	if s := r.Scrubber(); s != nil {
		all = append(all, s.strs...)
	}
	return newScrubber(append(all, extra...))
}
