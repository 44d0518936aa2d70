package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
)

// TestCheckShowsCredentialKindsAndScope: check (and the admin API's config
// view) name each entry's credential kinds and scope, never a value.
func TestCheckShowsCredentialKindsAndScope(t *testing.T) {
	const secret = "canary-check-creds-81f2"
	t.Setenv("HOOKGATE_CHECK_SECRET", secret)
	dir := t.TempDir()
	if _, _, err := ca.Init(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, `listen: {proxy: 127.0.0.1:0, admin: 127.0.0.1:0}
ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}
network:
  allowlist:
    - domain: api.example.com
      transform: {X-Team: "${env:HOOKGATE_CHECK_SECRET}"}
      basic: {username: agent, password: "${env:HOOKGATE_CHECK_SECRET}"}
      query: {api_key: "${env:HOOKGATE_CHECK_SECRET}"}
      match: {methods: [GET], paths: [/v1]}
      scope: strict
    - domain: plain.example.com
    - domain: github.com
      ports: [443]
      raw_ports: [22]
`)
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"check", "--config", cfg}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	want := "api.example.com (exact, credentials: headers X-Team; basic; query api_key; scope: methods GET; paths /v1; strict)"
	if !strings.Contains(out.String(), "github.com (exact, ports 443, raw_ports 22)") {
		t.Errorf("check output lacks the ports of github.com:\n%s", strings.ReplaceAll(out.String(), secret, "<secret>"))
	}
	if !strings.Contains(out.String(), want) || strings.Contains(out.String(), "plain.example.com (exact, credentials") {
		t.Fatalf("check output lacks %q:\n%s", want, strings.ReplaceAll(out.String(), secret, "<secret>"))
	}
	c, err := config.Load(cfg, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	view, err := json.Marshal(newConfigView(c, 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(view), `"credentials":"headers X-Team; basic; query api_key","scope":"methods GET; paths /v1; strict"`) {
		t.Errorf("config view lacks the credentials and scope: %s", strings.ReplaceAll(string(view), secret, "<secret>"))
	}
	for where, text := range map[string]string{"check output": out.String() + errOut.String(), "config view": string(view)} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret appears in the %s", where)
		}
	}
}
