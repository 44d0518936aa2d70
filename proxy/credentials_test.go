package proxy

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// queryCanary is a query secret with bytes a URL escapes, so that its
// escaped forms are exercised too.
const queryCanary = "hg-q canary/5d1e+x=do-not-leak"

// compileSpec compiles an entry's credentials with CANARY and QCANARY set.
func compileSpec(t testing.TB, spec transform.Spec) *transform.Rules {
	t.Helper()
	r, err := transform.CompileSpec(spec, transform.Options{LookupEnv: func(name string) (string, bool) {
		switch name {
		case "CANARY":
			return canary, true
		case "QCANARY":
			return queryCanary, true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// get sends a GET through the gateway and returns the status, header and
// body the client got.
func get(t *testing.T, c *http.Client, rawURL string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// assertAbsent fails when any of the secrets appears in text (without
// printing it).
func assertAbsent(t *testing.T, where, text string, secrets ...string) {
	t.Helper()
	for i, s := range secrets {
		if strings.Contains(text, s) {
			t.Fatalf("secret #%d appears in %s", i, where)
		}
	}
}

func TestBasicCredentialEndToEnd(t *testing.T) {
	var gotUser, gotPass string
	var gotOK bool
	var gotCount int
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		gotUser, gotPass, gotOK = r.BasicAuth()
		gotCount = len(r.Header.Values("Authorization"))
		auth := r.Header.Get("Authorization")
		w.Header().Set("X-Echo", auth)
		_, _ = io.WriteString(w, auth+"|"+gotPass)
	}, func(gc *gatewayConfig) {
		gc.entries = []config.Entry{{Transform: compileSpec(t, transform.Spec{
			Basic: &transform.BasicSpec{Username: "agent", Password: "${env:CANARY}"}})}}
	})
	resp, body := get(t, env.client(t), env.url("telemetry.example.com", "/x"),
		http.Header{"Authorization": {"Basic c2FuZGJveDpzYW5kYm94"}})
	if resp.StatusCode != 200 || !gotOK || gotUser != "agent" || gotPass != canary || gotCount != 1 {
		t.Fatalf("status %d; upstream got Basic ok=%v user %q, password right: %v, %d Authorization headers",
			resp.StatusCode, gotOK, gotUser, gotPass == canary, gotCount)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte("agent:" + canary))
	assertAbsent(t, "the client's answer", body+resp.Header.Get("X-Echo"), canary, b64)
	if resp.Header.Get("X-Echo") != "[redacted]" {
		t.Fatalf("echoed header not scrubbed")
	}
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if fmt.Sprint(d["injected"]) != "[Authorization]" {
		t.Fatalf("decision = %v", d)
	}
	assertAbsent(t, "the log", env.gw.logs.String(), canary, b64)
	assertAbsent(t, "Redact", env.gw.srv.Redact("err: "+b64+" "+canary), canary, b64)
}

func TestQueryCredentialEndToEnd(t *testing.T) {
	var got url.Values
	var gotRaw string
	env := newMITMEnv(t, func(w http.ResponseWriter, r *http.Request) {
		got, gotRaw = r.URL.Query(), r.URL.RawQuery
		w.Header().Set("X-Echo", r.URL.RawQuery)
		w.Header().Set("Location", "https://elsewhere.example/?"+r.URL.RawQuery)
		_, _ = io.WriteString(w, r.RequestURI+"|"+got.Get("api_key"))
	}, func(gc *gatewayConfig) {
		gc.entries = []config.Entry{{Transform: compileSpec(t, transform.Spec{
			Query: []transform.ParamSpec{{Name: "api_key", Value: "${env:QCANARY}"}}})}}
	})
	resp, body := get(t, env.client(t), env.url("telemetry.example.com", "/v1/x?a=1&api_key=mine&API_KEY=x&b=%20;api_key=z"), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(got["api_key"]) != 1 || got.Get("api_key") != queryCanary || got.Get("a") != "1" || len(got["API_KEY"]) != 0 {
		t.Fatalf("upstream query: api_key x%d (right: %v), a=%q, API_KEY x%d", len(got["api_key"]),
			got.Get("api_key") == queryCanary, got.Get("a"), len(got["API_KEY"]))
	}
	if strings.Count(gotRaw, "api_key") != 1 || strings.Contains(gotRaw, "z") {
		t.Fatal("a client copy of the parameter reached the upstream")
	}
	forms := []string{queryCanary, url.QueryEscape(queryCanary), url.PathEscape(queryCanary)}
	assertAbsent(t, "the client's answer", body+resp.Header.Get("X-Echo")+resp.Header.Get("Location"), forms...)
	d := env.gw.logs.waitDecisions(t, 1)[0]
	if fmt.Sprint(d["injected"]) != "[query:api_key]" {
		t.Fatalf("decision = %v", d)
	}
	assertAbsent(t, "the log", env.gw.logs.String(), forms...)
	assertAbsent(t, "Redact", env.gw.srv.Redact(url.QueryEscape(queryCanary)), forms...)
}

// TestScopeEndToEnd: credentials reach only the methods and paths of the
// entry's match, however the path is spelt; outside it a lenient entry
// sends the request bare and a strict one refuses it.
func TestScopeEndToEnd(t *testing.T) {
	scope := &config.Scope{Methods: []string{"GET"}, Paths: []string{"/v1/repos", "/v2/*/info"}}
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			s := *scope
			s.Strict = strict
			env := newMITMEnv(t, echoAuth, func(gc *gatewayConfig) {
				gc.entries[0].Scope = &s
			})
			c := env.client(t)
			for _, tc := range []struct {
				method, path string
				in           bool
			}{
				{"GET", "/v1/repos", true},
				{"GET", "/v1/repos/a/b?x=1", true},
				{"GET", "/v2/abc/info", true},
				{"POST", "/v1/repos/a", false},
				{"GET", "/v1/reposx", false},
				{"GET", "/v1/repos/%2e%2e/admin", false},
				{"GET", "/v1/repos/%2E%2E/%2e%2e/admin", false},
				{"GET", "/v1/repos/..%2f..%2fadmin", false},
				{"GET", "/v1/repos/%252e%252e/admin", false},
				{"GET", "/v1/repos/..;/admin", false},
				{"GET", "/v1/repos/..\\admin", false},
				{"GET", "/v1/repos//../../admin", false},
				{"GET", "/v1//repos/a", true},
				{"GET", "/v2/abc/def/info", false},
			} {
				before := len(env.up.requests())
				req, err := http.NewRequest(tc.method, env.url("telemetry.example.com", ""), nil)
				if err != nil {
					t.Fatal(err)
				}
				req.URL.Opaque = tc.path // sent as written, not re-encoded
				if i := strings.IndexByte(tc.path, '?'); i >= 0 {
					req.URL.Opaque, req.URL.RawQuery = tc.path[:i], tc.path[i+1:]
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case tc.in:
					if resp.StatusCode != 200 || string(body) != "[redacted]"+strings.Repeat("*", len("Bearer "+canary)-len("[redacted]"))+"|1" {
						t.Fatalf("%s %s: want the credential injected (echo masked), got %d %q", tc.method, tc.path, resp.StatusCode, hideCanary(string(body)))
					}
				case strict:
					if resp.StatusCode != 403 || resp.Header.Get(HeaderProxyError) != string(CodeTransformScope) || len(env.up.requests()) != before {
						t.Fatalf("%s %s: want %s and nothing forwarded, got %d %q", tc.method, tc.path, CodeTransformScope, resp.StatusCode, body)
					}
				default:
					if resp.StatusCode != 200 || string(body) != "|0" {
						t.Fatalf("%s %s: want the request sent bare, got %d %q", tc.method, tc.path, resp.StatusCode, hideCanary(string(body)))
					}
				}
			}
			env.assertNoCanary(t)
		})
	}
}
