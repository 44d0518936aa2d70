package transform

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// Spec is everything one allowlist entry injects: its headers, its HTTP
// Basic credentials and its query parameters.
type Spec struct {
	Headers []HeaderSpec
	Basic   *BasicSpec
	Query   []ParamSpec
	OAuth2  *OAuth2Spec
	SigV4   *AWSSigV4Spec
}

// BasicSpec is an entry's basic: {username, password}, as written (both take
// references).
type BasicSpec struct {
	Username, Password string
	Line               int
}

// ParamSpec is one query parameter of an entry's query: {name: value}.
type ParamSpec struct {
	Name, Value string
	Line        int
}

// CredentialError reports which basic or query credential is wrong and why.
// Like SpecError it never carries a resolved value.
type CredentialError struct {
	Kind  string // "basic" or "query"
	Name  string // the parameter (query) or the field (basic)
	Line  int
	Field string // "name" or "value" for query; "username" or "password" for basic
	Err   error
}

func (e *CredentialError) Error() string {
	where := e.Kind
	if e.Kind == "query" {
		where = fmt.Sprintf("query parameter %q", e.Name)
	}
	if e.Line > 0 {
		where += fmt.Sprintf(" (line %d)", e.Line)
	}
	return fmt.Sprintf("%s: %s: %v", where, e.Field, e.Err)
}

func (e *CredentialError) Unwrap() error { return e.Err }

// param is one compiled query parameter.
type param struct {
	name  string
	value Secret
}

// added is what the basic and query credentials add to an entry's secrets.
type added struct {
	secrets, envNames []string
}

// addCredentials compiles the Basic credentials and query parameters of
// spec into r, after its headers.
func (r *Rules) addCredentials(spec Spec, opts Options) (added, error) {
	var out added
	if b := spec.Basic; b != nil {
		if err := r.addBasic(*b, opts, &out); err != nil {
			return added{}, err
		}
	}
	if o := spec.OAuth2; o != nil {
		if err := r.addOAuth2(*o, opts, &out); err != nil {
			return added{}, err
		}
	}
	if a := spec.SigV4; a != nil {
		if err := r.addSigV4(*a, opts, &out); err != nil {
			return added{}, err
		}
	}
	seen := make(map[string]bool, len(spec.Query))
	for _, q := range spec.Query {
		if err := r.addParam(q, opts, seen, &out); err != nil {
			return added{}, err
		}
	}
	sort.Slice(r.query, func(a, b int) bool { return r.query[a].name < r.query[b].name })
	return out, nil
}

// addBasic sets Authorization: Basic base64(username:password) (RFC 7617).
// The secrets are the resolved parts, "username:password" (whose base64 is
// what the TextScrubber then finds), its base64 and the whole header value.
func (r *Rules) addBasic(b BasicSpec, opts Options, out *added) error {
	fail := func(field string, err error) error {
		return &CredentialError{Kind: "basic", Name: field, Line: b.Line, Field: field, Err: err}
	}
	for _, h := range r.headers {
		if SameHeaderName(h.name, "Authorization") {
			return fail("username", fmt.Errorf("%w: basic sets Authorization, which the transform sets too", ErrDuplicate))
		}
	}
	user, err := resolve(b.Username, opts)
	if err != nil {
		return fail("username", err)
	}
	if strings.IndexByte(user.value, ':') >= 0 {
		return fail("username", fmt.Errorf("%w: a Basic username may not contain ':' (RFC 7617)", ErrInvalidValue))
	}
	pass, err := resolve(b.Password, opts)
	if err != nil {
		return fail("password", err)
	}
	pair := user.value + ":" + pass.value
	enc := base64.StdEncoding.EncodeToString([]byte(pair))
	value := "Basic " + enc
	if len(value) > MaxValueLen {
		return fail("password", fmt.Errorf("%w: longer than %d bytes once encoded", ErrInvalidValue, MaxValueLen))
	}
	r.headers = append(r.headers, header{name: "Authorization", value: newSecret(value)})
	r.basic = true
	if parts := slices.Concat(user.parts, pass.parts); len(parts) > 0 {
		out.secrets = append(out.secrets, parts...)
		out.secrets = append(out.secrets, pair, enc, value)
	}
	out.envNames = append(out.envNames, user.envNames...)
	out.envNames = append(out.envNames, pass.envNames...)
	return nil
}

// addParam compiles one query parameter. Its secrets are the resolved parts,
// the whole value, and the value as it appears in a URL (query-escaped), so
// that an upstream echoing the request URL is scrubbed too.
func (r *Rules) addParam(q ParamSpec, opts Options, seen map[string]bool, out *added) error {
	fail := func(field string, err error) error {
		return &CredentialError{Kind: "query", Name: q.Name, Line: q.Line, Field: field, Err: err}
	}
	if q.Name == "" || indexCTL(q.Name) >= 0 {
		return fail("name", fmt.Errorf("%w: a query parameter name is non-empty text without control characters", ErrInvalidName))
	}
	key := strings.ToLower(q.Name)
	if seen[key] {
		return fail("name", fmt.Errorf("%w: query parameter %q is set twice", ErrDuplicate, q.Name))
	}
	seen[key] = true
	res, err := resolve(q.Value, opts)
	if err != nil {
		return fail("value", err)
	}
	r.query = append(r.query, param{name: q.Name, value: newSecret(res.value)})
	if len(res.parts) > 0 {
		out.secrets = append(out.secrets, res.parts...)
		out.secrets = append(out.secrets, res.value)
		for _, s := range append(slices.Clone(res.parts), res.value) {
			out.secrets = append(out.secrets, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	out.envNames = append(out.envNames, res.envNames...)
	return nil
}

// HasBasic reports whether the rules set Authorization: Basic.
func (r *Rules) HasBasic() bool { return r != nil && r.basic }

// QueryNames returns the names of the configured query parameters, sorted.
// The caller may modify the slice.
func (r *Rules) QueryNames() []string {
	if r == nil || len(r.query) == 0 {
		return nil
	}
	names := make([]string, len(r.query))
	for i, q := range r.query {
		names[i] = q.name
	}
	return names
}

// ApplyQuery sets the configured query parameters of u: every parameter
// the client sent under a configured name (compared case-insensitively, as
// some frameworks do) is removed, then each configured one is appended once.
// The rest of the query is kept byte for byte. A nil *Rules, or one without
// query parameters, leaves u as it is.
func (r *Rules) ApplyQuery(u *url.URL) {
	if r == nil || len(r.query) == 0 {
		return
	}
	var kept []string
	for _, pair := range strings.Split(u.RawQuery, "&") {
		if pair == "" {
			continue
		}
		if r.isQueryName(pair) {
			continue
		}
		kept = append(kept, pair)
	}
	for _, q := range r.query {
		kept = append(kept, url.QueryEscape(q.name)+"="+url.QueryEscape(q.value.Reveal()))
	}
	u.RawQuery = strings.Join(kept, "&")
	u.ForceQuery = false
}

// isQueryName reports whether a name=value pair of a query (or the name
// alone) names a configured parameter, however the client encoded it. A
// name that does not decode is compared as written.
func (r *Rules) isQueryName(pair string) bool {
	// A ';' splits parameters for some backends: a pair "x=1;key=v" may
	// carry a configured name behind it.
	for _, part := range strings.Split(pair, ";") {
		n, _, _ := strings.Cut(part, "=")
		if dec, err := url.QueryUnescape(n); err == nil {
			n = dec
		}
		for _, q := range r.query {
			if strings.EqualFold(strings.TrimSpace(n), q.name) {
				return true
			}
		}
	}
	return false
}

// Describe names what r injects, never a value: the transform's header
// names, "basic" and the query parameter names, e.g.
// "headers X-Team; basic; query api_key".
func (r *Rules) Describe() string {
	if r == nil {
		return ""
	}
	var parts []string
	var headers []string
	for _, h := range r.headers {
		if _, configured := r.refs[h.name]; configured {
			headers = append(headers, h.name)
		}
	}
	if len(headers) > 0 {
		parts = append(parts, "headers "+strings.Join(headers, ","))
	}
	if r.basic {
		parts = append(parts, "basic")
	}
	if r.oauth2 != nil {
		parts = append(parts, "oauth2 "+r.oauth2.TokenURL.Redacted())
	}
	if r.sigv4 != nil {
		parts = append(parts, "aws_sigv4 "+r.sigv4.Service+"/"+r.sigv4.Region)
	}
	if names := r.QueryNames(); len(names) > 0 {
		parts = append(parts, "query "+strings.Join(names, ","))
	}
	return strings.Join(parts, "; ")
}
