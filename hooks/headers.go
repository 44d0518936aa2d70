package hooks

import (
	"fmt"
	"net/http"
	"strings"
)

// The rules for the "headers" of an http handler in hooks.json. The loader
// applies them; the HTTP client sends what it is given.

// validHeaderName reports whether s is an HTTP token (RFC 9110 field name).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// reservedHeader reports whether hooks.json may not set this header: the
// client sets it, or it would break the request.
func reservedHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Type", "Content-Length", "Transfer-Encoding", "Connection",
		"Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
		"Idempotency-Key", "User-Agent":
		return true
	}
	return false
}

// looksLikeCredential reports whether a configured header probably carries
// a secret. Credentials belong in the gateway's transform, not in
// hooks.json. The result explains why.
func looksLikeCredential(name, value string) (bool, string) {
	n := strings.ToLower(name)
	// Substrings of header names that usually carry a credential.
	for _, w := range []string{"auth", "token", "secret", "password", "passwd", "cookie", "api-key", "apikey", "api_key", "session", "signature", "credential", "private"} {
		if strings.Contains(n, w) {
			return true, fmt.Sprintf("header name %q looks like a credential", name)
		}
	}
	if strings.HasSuffix(n, "-key") && n != "idempotency-key" {
		return true, fmt.Sprintf("header name %q looks like a credential", name)
	}
	v := strings.ToLower(strings.TrimSpace(value))
	for _, p := range []string{"bearer ", "basic ", "token ", "digest "} {
		if strings.HasPrefix(v, p) {
			return true, fmt.Sprintf("value of header %q looks like a credential (%q scheme)", name, strings.TrimSpace(p))
		}
	}
	for _, p := range []string{"sk-", "ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "akia", "glpat-"} {
		if strings.HasPrefix(v, p) {
			return true, fmt.Sprintf("value of header %q looks like an API key", name)
		}
	}
	return false, ""
}
