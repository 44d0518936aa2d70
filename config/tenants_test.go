package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/transform"
)

const (
	tenantFileSecret = "hg-canary-file-secret-5a7e"
	tenantEnvSecret  = "hg-canary-env-secret-c2d9"
	tenantHashed     = "hg-canary-hashed-secret-0b41"
)

func hexSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func parseTenants(t *testing.T, text string) *Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.pass"), []byte(tenantFileSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse(filepath.Join(dir, "c.yaml"), []byte(text), Options{Transform: transform.Options{
		Dir:       dir,
		LookupEnv: func(n string) (string, bool) { return tenantEnvSecret, n == "B_TOKEN" },
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTenantsCompile(t *testing.T) {
	c := parseTenants(t, `
auth: {required: true}
tenants:
  - name: team-a
    proxy_auth:
      - {type: basic, user: team-a, password: "${file:a.pass}"}
      - {type: basic, user: sb-7, sha256: "`+hexSHA(tenantHashed)+`"}
    clients: [192.0.2.0/28, 2001:db8::1]
    network:
      allowlist: [{domain: a.example.com}]
  - name: team-b
    proxy_auth:
      - {type: bearer, token: "${env:B_TOKEN}"}
      - {type: bearer, sha256: "`+hexSHA(tenantHashed+"-b")+`"}
    network:
      allowlist: [{domain: b.example.com}]
`)
	p, err := c.Policy(PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := p.Tenants
	if got := strings.Join(ts.Names(), ","); got != "team-a,team-b" || !ts.Required {
		t.Fatalf("names %q, required %v", got, ts.Required)
	}
	for _, tc := range []struct {
		name string
		t    *Tenant
		ok   bool
		want string
	}{
		{"file password", first(ts.Basic("team-a", tenantFileSecret)), true, "team-a"},
		{"hashed password", first(ts.Basic("sb-7", tenantHashed)), true, "team-a"},
		{"wrong password", first(ts.Basic("team-a", tenantEnvSecret)), false, ""},
		{"unknown user", first(ts.Basic("nobody", tenantFileSecret)), false, ""},
		{"env token", first(ts.Bearer(tenantEnvSecret)), true, "team-b"},
		{"hashed token", first(ts.Bearer(tenantHashed + "-b")), true, "team-b"},
		{"password as token", first(ts.Bearer(tenantFileSecret)), false, ""},
		{"client range", first(ts.ByClient(netip.MustParseAddr("192.0.2.9"))), true, "team-a"},
		{"mapped client", first(ts.ByClient(netip.MustParseAddr("::ffff:192.0.2.9"))), true, "team-a"},
		{"single v6 client", first(ts.ByClient(netip.MustParseAddr("2001:db8::1"))), true, "team-a"},
		{"other client", first(ts.ByClient(netip.MustParseAddr("192.0.2.17"))), false, ""},
	} {
		if (tc.t != nil) != tc.ok || (tc.t != nil && tc.t.Name != tc.want) {
			t.Errorf("%s: got %v", tc.name, tc.t)
		}
	}
	if p.Intercepts("a.example.com") {
		t.Error("a host no policy injects into is intercepted")
	}
	a, _ := ts.ByName("team-a")
	if !a.Policy.Decide("a.example.com").Allowed || a.Policy.Decide("b.example.com").Allowed || p.Decide("a.example.com").Allowed {
		t.Error("each tenant's allowlist must be its own, and the top-level one apart")
	}
	// Nothing printable holds a secret or its hash.
	for _, text := range []string{fmt.Sprintf("%+v", c), fmt.Sprintf("%+v", c.Tenants), fmt.Sprintf("%v", c.Tenants[0].Credentials)} {
		for _, s := range []string{tenantFileSecret, tenantEnvSecret, tenantHashed, hexSHA(tenantFileSecret), hexSHA(tenantEnvSecret)} {
			if strings.Contains(text, s) {
				t.Fatal("a printed config holds a secret or its hash")
			}
		}
	}
}

func first(t *Tenant, _ bool) *Tenant { return t }

func TestTenantsAmbiguousCredentials(t *testing.T) {
	_, err := Parse("c.yaml", []byte(`
tenants:
  - name: a
    proxy_auth: [{type: bearer, token: "${env:T}"}, {type: basic, user: u, password: "${env:T}"}]
  - name: b
    proxy_auth: [{type: bearer, token: "${env:T}"}, {type: basic, user: u, password: "${env:T}"}]
`), Options{Transform: transform.Options{LookupEnv: func(string) (string, bool) { return tenantEnvSecret, true }}})
	if err == nil {
		t.Fatal("two tenants with one token and one user were accepted")
	}
	for _, want := range []string{"tenants[1].proxy_auth[0]: the same token", "tenants[1].proxy_auth[1].user: user \"u\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), tenantEnvSecret) {
		t.Fatal("the error holds the secret")
	}
}

// TestTenantsTransformsNeedCA: a tenant's transform needs the CA like a
// top-level one.
func TestTenantsTransformsNeedCA(t *testing.T) {
	_, err := Parse("c.yaml", []byte(`
tenants:
  - name: a
    clients: [192.0.2.1]
    network:
      allowlist:
        - {domain: api.example.com, transform: {Authorization: "Bearer ${env:T}"}}
`), Options{Transform: transform.Options{LookupEnv: func(string) (string, bool) { return tenantEnvSecret, true }}})
	if err == nil || !strings.Contains(err.Error(), "ca: entries with a transform need") {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkTenantsLoad compiles a config of 1,000 tenants, each with a
// credential, a client range and a transform entry.
func BenchmarkTenantsLoad(b *testing.B) {
	text := thousandTenants(1000)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for i := 0; i < b.N; i++ {
		c, err := Parse("c.yaml", text, Options{Transform: transform.Options{LookupEnv: func(n string) (string, bool) { return "secret-" + n, true }}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Policy(PolicyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func thousandTenants(n int) []byte {
	var sb strings.Builder
	sb.WriteString("ca: {cert_file: ca.pem, key_file: ca.key}\nauth: {required: true}\ntenants:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, `  - name: t%d
    proxy_auth: [{type: basic, user: t%d, password: "${env:P%d}"}]
    clients: [10.%d.%d.0/24]
    network:
      allowlist:
        - {domain: api.example.com, transform: {Authorization: "Bearer ${env:T%d}"}}
        - {domain: "*.github.com"}
`, i, i, i, i/256, i%256, i)
	}
	return []byte(sb.String())
}

// BenchmarkTenantsSelect is the per-request cost of finding a client's
// tenant among 1,000: by client address, by basic credential, by bearer
// token.
func BenchmarkTenantsSelect(b *testing.B) {
	c, err := Parse("c.yaml", thousandTenants(1000), Options{Transform: transform.Options{LookupEnv: func(n string) (string, bool) { return "secret-" + n, true }}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := c.Policy(PolicyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ts := p.Tenants
	addr := netip.MustParseAddr("10.3.200.9")
	b.Run("by-client", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if t, ok := ts.ByClient(addr); !ok || t.Name != "t968" {
				b.Fatal("not found")
			}
		}
	})
	b.Run("basic", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := ts.Basic("t968", "secret-P968"); !ok {
				b.Fatal("not found")
			}
		}
	})
}

// TestThousandTenantsMemory reports what 1,000 compiled tenants hold on
// the heap (a figure for the docs, not a limit).
func TestThousandTenantsMemory(t *testing.T) {
	text := thousandTenants(1000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := Parse("c.yaml", text, Options{Transform: transform.Options{LookupEnv: func(n string) (string, bool) { return "secret-" + n, true }}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy(PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(p.Tenants.Names()) != 1000 {
		t.Fatalf("%d tenants", len(p.Tenants.Names()))
	}
	t.Logf("1,000 tenants: %.1f MiB retained (config and compiled policies)", float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))
	runtime.KeepAlive(c)
	runtime.KeepAlive(p)
}

func TestInterceptsAcrossTenants(t *testing.T) {
	c, err := Parse("c.yaml", []byte(`
ca: {cert_file: ca.pem, key_file: ca.key}
network:
  allowlist: [{domain: top.example.com, transform: {X-K: "${env:T}"}}, {domain: plain.example.com}]
tenants:
  - name: a
    clients: [192.0.2.1]
    network:
      allowlist: [{domain: tenant.example.com, transform: {X-K: "${env:T}"}}, {domain: plain.example.com}]
`), Options{Transform: transform.Options{LookupEnv: func(string) (string, bool) { return tenantEnvSecret, true }}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy(PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{"top.example.com": true, "tenant.example.com": true, "plain.example.com": false, "other.example.com": false} {
		if got := p.Intercepts(host); got != want {
			t.Errorf("Intercepts(%s) = %v, want %v", host, got, want)
		}
	}
}
