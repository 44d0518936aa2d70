package config

import (
	"fmt"
	"net/url"
	"path"
	"strings"
)

// Scope limits an entry's credentials to some requests (the entry's match:
// {methods, paths}). A nil *Scope matches every request.
type Scope struct {
	// Methods are the request methods that get the credentials, upper
	// case; empty: every method.
	Methods []string
	// Paths are prefixes (whole segments: "/v1/repos" matches "/v1/repos"
	// and "/v1/repos/x", not "/v1/reposx") or, when they hold a '*', '?'
	// or '[', path.Match globs; empty: every path.
	Paths []string
	// Strict refuses a request that does not match (scope: strict)
	// instead of sending it on without the credentials.
	Strict bool
}

// Matches reports whether a request with this method and URL path (as
// decoded by net/url) gets the credentials. The path is matched as
// CanonicalPath makes it, so that an encoded or dotted path cannot reach
// another resource with the credentials of this one.
func (s *Scope) Matches(method, urlPath string) bool {
	if s == nil {
		return true
	}
	if len(s.Methods) > 0 && !contains(s.Methods, method) {
		return false
	}
	if len(s.Paths) == 0 {
		return true
	}
	p, ok := CanonicalPath(urlPath)
	if !ok {
		return false
	}
	for _, pat := range s.Paths {
		if pathMatches(pat, p) {
			return true
		}
	}
	return false
}

// String describes the scope (no secrets: it holds none).
func (s *Scope) String() string {
	if s == nil {
		return "every request"
	}
	var parts []string
	if len(s.Methods) > 0 {
		parts = append(parts, "methods "+strings.Join(s.Methods, ","))
	}
	if len(s.Paths) > 0 {
		parts = append(parts, "paths "+strings.Join(s.Paths, ","))
	}
	if s.Strict {
		parts = append(parts, "strict")
	} else {
		parts = append(parts, "others sent without credentials")
	}
	return strings.Join(parts, "; ")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// maxDecodes bounds how many times CanonicalPath decodes a path: a path
// still encoded after that is refused rather than guessed at.
const maxDecodes = 3

// CanonicalPath is the form a path is matched in: percent-decoded until
// nothing changes (so "%252e%252e" is "..", as a backend that decodes twice
// sees it), with '\' taken as '/' and ";params" cut from every segment (as
// some servers do), then cleaned (no "//", "." or ".."). false when the
// path does not decode or is still encoded after maxDecodes rounds.
func CanonicalPath(p string) (string, bool) {
	for i := 0; ; i++ {
		dec, err := url.PathUnescape(p)
		if err != nil {
			return "", false
		}
		if dec == p {
			break
		}
		if i == maxDecodes {
			return "", false
		}
		p = dec
	}
	p = strings.ReplaceAll(p, `\`, "/")
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return path.Clean("/" + strings.Join(segs, "/")), true
}

// pathMatches matches a canonical path against one configured pattern.
func pathMatches(pattern, p string) bool {
	if isGlob(pattern) {
		ok, err := path.Match(pattern, p)
		return err == nil && ok
	}
	if pattern == "/" {
		return true
	}
	prefix := strings.TrimSuffix(pattern, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

func isGlob(pattern string) bool { return strings.ContainsAny(pattern, "*?[") }

// compileScope reads an entry's match and scope.
func compileScope(m *fileMatch, scope, field string, r *reporter) *Scope {
	switch scope {
	case "", "strict", "lenient":
	default:
		r.at(field+".scope", "%q is not a scope; use strict (refuse requests outside match) or lenient (send them without credentials, the default)", scope)
		return nil
	}
	if m == nil {
		if scope != "" {
			r.at(field+".scope", "only applies with a match: {methods, paths}")
		}
		return nil
	}
	s := &Scope{Strict: scope == "strict"}
	for i, meth := range m.Methods {
		up := strings.ToUpper(strings.TrimSpace(meth))
		if up == "" || strings.ContainsAny(up, " \t/:") {
			r.at(fmt.Sprintf("%s.match.methods[%d]", field, i), "%q is not an HTTP method", meth)
			continue
		}
		s.Methods = append(s.Methods, up)
	}
	for i, p := range m.Paths {
		f := fmt.Sprintf("%s.match.paths[%d]", field, i)
		if err := checkPathPattern(p); err != nil {
			r.at(f, "%v", err)
			continue
		}
		s.Paths = append(s.Paths, p)
	}
	if len(m.Methods) == 0 && len(m.Paths) == 0 {
		r.at(field+".match", "an empty match matches every request; list methods, paths, or both")
	}
	return s
}

// checkPathPattern validates a configured path: absolute, already in
// canonical form (so that what is written is what is compared), and a
// valid glob when it is one.
func checkPathPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q: a path starts with '/'", p)
	}
	if isGlob(p) {
		if _, err := path.Match(p, "/"); err != nil {
			return fmt.Errorf("%q is not a valid glob: %v", p, err)
		}
		return nil
	}
	canon, ok := CanonicalPath(p)
	trimmed := strings.TrimSuffix(p, "/")
	if !ok || (canon != p && canon != trimmed) {
		return fmt.Errorf("%q is not a clean path; write %q", p, canon)
	}
	return nil
}
