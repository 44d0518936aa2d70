package proxy

import (
	"net/http"
	"net/url"
)

// CodeTransformScope refuses a request to an entry whose credentials are
// scoped (match: {methods, paths}, scope: strict) when the request is outside
// that scope.
const CodeTransformScope Code = "blocked-by-transform-scope"

// applyScope decides whether the request (its method and URL) gets the
// credentials of the exchange's entry. Outside the entry's match, a strict
// entry refuses it; otherwise it goes on bare (ex.bare). The path is matched
// in its canonical form (config.CanonicalPath), so that "%2e%2e", "//" and
// the like cannot carry credentials to a path outside the scope. The reason
// quotes neither the method nor the path: they are the client's bytes.
func (ex *exchange) applyScope(method string, u *url.URL) *denial {
	e := ex.entry
	if e == nil || e.Transform == nil || e.Scope.Matches(method, u.Path) {
		return nil
	}
	if e.Scope.Strict {
		return deny(CodeTransformScope, http.StatusForbidden, ex.host,
			"the request is outside the methods and paths %s's credentials are scoped to (scope: strict)", ex.host)
	}
	ex.bare = true
	return nil
}
