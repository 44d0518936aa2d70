package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// credConfig is a config with a CA (transforms need one) and the given
// allowlist entries.
func credConfig(entries string) []byte {
	return []byte("ca: {cert_file: /x/ca.pem, key_file: /x/ca-key.pem}\nnetwork:\n  allowlist:\n" + entries)
}

func TestLoadCredentialKinds(t *testing.T) {
	const secret = "canary-cred-4c1d-secret"
	t.Setenv("HOOKGATE_TEST_TOKEN", secret)
	c, err := Parse("c.yaml", credConfig(`
    - domain: basic.example.com
      basic: {username: agent, password: "${env:HOOKGATE_TEST_TOKEN}"}
      match: {methods: [get, HEAD], paths: [/v1/repos, "/v2/*/info"]}
      scope: strict
    - domain: query.example.com
      transform: {X-Team: core}
      query: {api_key: "${env:HOOKGATE_TEST_TOKEN}"}
    - domain: oauth.example.com
      oauth2:
        token_url: https://query.example.com/oauth/token
        client_id: agent
        client_secret: "${env:HOOKGATE_TEST_TOKEN}"
        scopes: [read]
        audience: https://oauth.example.com
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, q := c.Entries[0], c.Entries[1]
	if !b.Transform.HasBasic() || strings.Join(b.Transform.Names(), ",") != "Authorization" {
		t.Errorf("basic entry: %v", b.Transform)
	}
	if s := b.Scope; s == nil || !s.Strict || strings.Join(s.Methods, ",") != "GET,HEAD" || len(s.Paths) != 2 {
		t.Errorf("scope = %v", b.Scope)
	}
	if strings.Join(q.Transform.QueryNames(), ",") != "api_key" || strings.Join(q.Transform.Names(), ",") != "X-Team" || q.Scope != nil {
		t.Errorf("query entry: %v, scope %v", q.Transform, q.Scope)
	}
	if o := c.Entries[2].Transform.OAuth2(); o == nil || o.TokenURL.Host != "query.example.com" || o.ClientSecret.Reveal() != secret || o.Audience != "https://oauth.example.com" {
		t.Errorf("oauth2 entry: %v", o)
	}
	if d := c.Entries[2].Transform.Describe(); d != "oauth2 https://query.example.com/oauth/token" {
		t.Errorf("Describe = %q", d)
	}
	found := 0
	for _, e := range c.Entries {
		for _, s := range e.Transform.Secrets() {
			if s.Reveal() == secret {
				found++
			}
		}
	}
	if found != 3 {
		t.Errorf("the secret of basic, query and oauth2 is not among the entries' secrets (%d)", found)
	}
}

func TestLoadCredentialErrors(t *testing.T) {
	const secret = "canary-cred-err-9a2b"
	t.Setenv("HOOKGATE_TEST_TOKEN", secret)
	for _, tc := range []struct{ entries, want string }{
		{`
    - domain: a.example.com
      transform: {Authorization: "Bearer ${env:HOOKGATE_TEST_TOKEN}"}
      basic: {username: u, password: "${env:HOOKGATE_TEST_TOKEN}"}
`, "c.yaml:7: network.allowlist[0].basic.username: header set twice: basic sets Authorization"},
		{`
    - domain: a.example.com
      basic: {username: "a:b", password: "${env:HOOKGATE_TEST_TOKEN}"}
`, "network.allowlist[0].basic.username: invalid header value: a Basic username may not contain ':'"},
		{`
    - domain: a.example.com
      basic: {username: u, password: "${env:HOOKGATE_NOT_SET}"}
`, "network.allowlist[0].basic.password: unresolved reference"},
		{`
    - domain: a.example.com
      query: {k: "${env:HOOKGATE_TEST_TOKEN}", K: "x"}
`, "network.allowlist[0].query.K: name: header set twice: query parameter \"K\" is set twice"},
		{`
    - domain: a.example.com
      query: [a, b]
`, "network.allowlist[0].query: query is a map"},
		{`
    - domain: a.example.com
      match: {paths: [/x]}
`, "network.allowlist[0].match: match and scope limit an entry's credentials; this entry has none"},
		{`
    - domain: a.example.com
      query: {k: v}
      match: {paths: [x, /a/../b, "/[x"]}
`, "network.allowlist[0].match.paths[0]: \"x\": a path starts with '/'"},
		{`
    - domain: a.example.com
      query: {k: v}
      match: {paths: [/a/../b]}
`, "network.allowlist[0].match.paths[0]: \"/a/../b\" is not a clean path; write \"/b\""},
		{`
    - domain: a.example.com
      query: {k: v}
      match: {methods: [GET]}
      scope: tight
`, "network.allowlist[0].scope: \"tight\" is not a scope"},
		{`
    - domain: a.example.com
      query: {k: v}
      match: {}
`, "network.allowlist[0].match: an empty match"},
		{`
    - domain: a.example.com
      query: {k: v}
      match: {method: [GET]}
`, "network.allowlist[0].match.method"},
		{`
    - domain: a.example.com
      oauth2: {token_url: "https://auth.example.com/token", client_id: c, client_secret: "${env:HOOKGATE_TEST_TOKEN}"}
`, "network.allowlist[0].oauth2.token_url: auth.example.com is not on the allowlist"},
		{`
    - domain: a.example.com
      oauth2: {token_url: "http://a.example.com/token", client_id: c, client_secret: "${env:HOOKGATE_TEST_TOKEN}"}
`, "network.allowlist[0].oauth2.token_url: invalid header value: the token URL must be https"},
		{`
    - domain: a.example.com
      basic: {username: u, password: p}
      oauth2: {token_url: "https://a.example.com/token", client_id: c, client_secret: "${env:HOOKGATE_TEST_TOKEN}"}
`, "network.allowlist[0].oauth2.token_url: header set twice: oauth2 sets Authorization"},
		{`
    - domain: a.example.com
      oauth2: {token_url: "https://a.example.com/token", client_id: c, client_secret: "${env:HOOKGATE_UNSET_X}"}
`, "network.allowlist[0].oauth2.client_secret: unresolved reference"},
		{`
    - domain: a.example.com
      basic: {username: u, password: p}
      aws_sigv4: {region: eu-west-1, service: s3, access_key_id: AK, secret_access_key: "${env:HOOKGATE_TEST_TOKEN}"}
`, "network.allowlist[0].aws_sigv4.region: header set twice: aws_sigv4 sets Authorization"},
		{`
    - domain: a.example.com
      aws_sigv4: {region: "eu west", service: s3, access_key_id: AK, secret_access_key: "${env:HOOKGATE_TEST_TOKEN}"}
`, "network.allowlist[0].aws_sigv4.region: invalid header value"},
		{`
    - domain: a.example.com
      aws_sigv4: {region: eu-west-1, service: s3, access_key_id: AK}
`, "network.allowlist[0].aws_sigv4.secret_access_key: empty value"},
		{`
    - domain: a.example.com
      ports: [443, 0, 70000]
`, "network.allowlist[0].ports[1]: 0 is not a port from 1 to 65535"},
		{`
    - domain: "*"
      raw_ports: [22]
`, "network.allowlist[0].raw_ports: raw tunnels on \"*\""},
		{`
    - domain: a.example.com
      ports: []
`, "network.allowlist[0].ports: an empty list would open no port"},
	} {
		_, err := Parse("c.yaml", credConfig(tc.entries), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\nwant error containing %q, got %v", tc.entries, tc.want, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatal("an error carries the secret")
		}
	}
}

func TestCanonicalPathAndScope(t *testing.T) {
	for in, want := range map[string]string{
		"/a/b":               "/a/b",
		"//a//b/":            "/a/b",
		"/a/%2e%2e/b":        "/b",
		"/a/%252e%252e/b":    "/b",
		"/a/..%2fb":          "/b",
		"/a/..;x=1/b":        "/b",
		`/a/..\b`:            "/b",
		"/a/./b/../c":        "/a/c",
		"":                   "/",
		"/%2525252e%25252e/": "",
	} {
		got, ok := CanonicalPath(in)
		if want == "" && ok {
			t.Errorf("CanonicalPath(%q) = %q, want refused", in, got)
		}
		if want != "" && (got != want || !ok) {
			t.Errorf("CanonicalPath(%q) = %q, %v, want %q", in, got, ok, want)
		}
	}
	s := &Scope{Methods: []string{"GET"}, Paths: []string{"/v1/repos", "/v2/*/info", "/files/"}}
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/v1/repos", true}, {"GET", "/v1/repos/a", true}, {"GET", "/v1/reposx", false},
		{"get", "/v1/repos", false}, {"POST", "/v1/repos", false},
		{"GET", "/v2/a/info", true}, {"GET", "/v2/a/b/info", false},
		{"GET", "/files", true}, {"GET", "/files/x", true}, {"GET", "/v1/repos/../admin", false},
	} {
		if got := s.Matches(tc.method, tc.path); got != tc.want {
			t.Errorf("Matches(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
	if !(*Scope)(nil).Matches("DELETE", "/anything") {
		t.Error("a nil scope must match every request")
	}
}

func TestPortsAndRawPorts(t *testing.T) {
	c, err := Parse("p.yaml", credConfig(`
    - domain: github.com
      ports: [443]
      raw_ports: [22]
    - domain: api.example.com
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy(PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gh, api := &c.Entries[0], &c.Entries[1]
	if !gh.PortAllowed(443) || !gh.PortAllowed(22) || gh.PortAllowed(80) || !gh.RawPort(22) || gh.RawPort(443) {
		t.Errorf("github.com: ports %v, raw %v", gh.Ports, gh.RawPorts)
	}
	if !api.PortAllowed(8443) || api.RawPort(22) {
		t.Error("an entry without ports opens every port, none raw")
	}
	var pe *PortError
	if _, _, err := p.Judge(t.Context(), "github.com", netip.Addr{}, 80, nil); !errors.As(err, &pe) {
		t.Errorf("Judge(github.com:80) = %v, want a PortError", err)
	}
	if _, _, err := p.Judge(t.Context(), "github.com", netip.Addr{}, 22, nil); err != nil {
		t.Errorf("Judge(github.com:22) = %v", err)
	}
}
