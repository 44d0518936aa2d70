package main

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/ca"
	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/sandbox"
	"github.com/hookgate/hookgate/transform"
)

// TestCheckShowsTenants: `gateway check` shows per tenant how it is
// recognised, what it allows and injects, and its limits — never a secret
// or its hash.
func TestCheckShowsTenants(t *testing.T) {
	const pass, token = "hg-canary-check-pass-0f3a", "hg-canary-check-token-b61e"
	t.Setenv("HG_CHECK_PASS", pass)
	t.Setenv("HG_CHECK_TOKEN", token)
	dir := t.TempDir()
	if _, _, err := ca.Init(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, `listen: {proxy: 127.0.0.1:0, admin: 127.0.0.1:0}
ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}
auth: {required: true}
tenants:
  - name: team-a
    proxy_auth: [{type: basic, user: team-a, password: "${env:HG_CHECK_PASS}"}]
    clients: [192.0.2.0/28]
    limits: {requests_per_second: 5, bytes_per_minute: 1000000}
    network:
      allowlist:
        - {domain: api.example.com, transform: {Authorization: "Bearer ${env:HG_CHECK_TOKEN}"}}
        - {domain: "*.github.com"}
`)
	out, errOut, code := runCLI(t, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"auth.required  true",
		"tenant team-a",
		"identified by  proxy_auth basic user team-a; clients 192.0.2.0/28",
		"api.example.com (exact) injects Authorization",
		"*.github.com (",
		"limits         requests_per_second 5 (burst 5), bytes_per_minute 1000000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	for _, s := range []string{pass, token} {
		sum := sha256.Sum256([]byte(s))
		if strings.Contains(out+errOut, s) || strings.Contains(out+errOut, hex.EncodeToString(sum[:])) {
			t.Fatal("check shows a secret or its hash")
		}
	}
}

// tenantsEnv are the secrets configs/tenants.yaml names.
var tenantsEnv = map[string]string{
	"TEAM_A_PROXY_PASS": "p", "TEAM_B_PROXY_TOKEN": "t", "TEAM_A_API_TOKEN": "a", "TEAM_B_API_TOKEN": "b",
}

// TestSandboxEnvWithoutTenantSecrets: the secrets a tenant's transforms
// read do not reach a command `sandbox exec` runs, like the top-level ones.
func TestSandboxEnvWithoutTenantSecrets(t *testing.T) {
	const secret = "hg-canary-tenant-env-77aa"
	cfg, err := config.Parse("test.yaml", []byte(`ca: {cert_file: /nonexistent/ca.pem, key_file: /nonexistent/ca-key.pem}
tenants:
  - name: a
    clients: [192.0.2.1]
    network:
      allowlist:
        - {domain: api.example.com, transform: {Authorization: "Bearer ${env:TENANT_TOKEN}"}}
`), config.Options{Transform: transform.Options{LookupEnv: func(k string) (string, bool) { return secret, k == "TENANT_TOKEN" }}})
	if err != nil {
		t.Fatal(err)
	}
	got := sandbox.CommandEnv([]string{"PATH=/usr/bin", "TENANT_TOKEN=" + secret, "COPY=x" + secret}, configTransforms(cfg), "")
	if !slices.Equal(got, []string{"PATH=/usr/bin"}) {
		t.Errorf("the command's environment has %d variables, want PATH only", len(got))
	}
}
