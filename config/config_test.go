package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestLoadGood(t *testing.T) {
	c, err := Load("testdata/good.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var domains []string
	for _, e := range c.Allowlist.Entries() {
		domains = append(domains, e.Domain)
	}
	if got, want := strings.Join(domains, " "), "api.example.com *.github.com xn--bcher-kva.example *"; got != want {
		t.Errorf("allowlist = %q, want %q", got, want)
	}
	if len(c.AllowCIDRs) != 2 || c.AllowCIDRs[1] != netip.MustParsePrefix("fd12:3456::/32") {
		t.Errorf("allow_cidrs = %v", c.AllowCIDRs)
	}
	wantDNS := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("[2001:db8::53]:5353")}
	if len(c.DNSServers) != 2 || c.DNSServers[0] != wantDNS[0] || c.DNSServers[1] != wantDNS[1] {
		t.Errorf("dns.servers = %v, want %v", c.DNSServers, wantDNS)
	}
	if c.ProxyListen != "127.0.0.1:3128" || c.UpstreamCAFile != "/etc/ssl/internal.pem" || c.LogLevel != zerolog.DebugLevel {
		t.Errorf("config = %+v", c)
	}
}

func TestLoadJSONAndDefaults(t *testing.T) {
	c, err := Load("testdata/good.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyListen != DefaultProxyListen || c.LogLevel != zerolog.InfoLevel || len(c.Allowlist.Entries()) != 1 {
		t.Errorf("config = %+v", c)
	}
	empty, err := Parse("empty.yaml", nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.Allowlist.Entries()) != 0 || empty.Allowlist.Decide("example.com").Allowed {
		t.Error("an empty config must deny every host")
	}
}

// TestLoadBad: each file in testdata/bad is one failure mode; its first line
// says which error (file:line: field: message) it must produce.
func TestLoadBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("testdata/bad: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("%s: first line must be '# want: <error>'", f)
			}
			_, err = Load(f, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want Errors", err)
			}
			if !strings.Contains(err.Error(), "testdata/"+want) {
				t.Fatalf("error:\n  %v\nwant it to contain:\n  testdata/%s", err, want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml", Options{})
	if err == nil || !strings.Contains(err.Error(), "testdata/does-not-exist.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// TestAllErrorsReported: one pass reports every problem, not just the first.
func TestAllErrorsReported(t *testing.T) {
	_, err := Parse("multi.yaml", []byte("network:\n  allow_cidrs: [bad, 0.0.0.0/0]\nlog:\n  level: loud\n"), Options{})
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	bad, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, file := range append(files, bad...) {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, Options{})
		if err == nil && c.Allowlist == nil {
			t.Fatal("no error and no allowlist")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}

func TestLoadTransforms(t *testing.T) {
	t.Setenv("HOOKGATE_TEST_TOKEN", "tok-123")
	c, err := Load("testdata/good-transform.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.HasTransforms() || len(c.Entries) != 3 || c.Entries[2].Transform != nil {
		t.Fatalf("entries = %+v", c.Entries)
	}
	tel, api := c.Entries[0], c.Entries[1]
	if got := strings.Join(tel.Transform.Names(), ","); got != "Authorization,X-Source" || tel.AllowPlaintext {
		t.Errorf("telemetry entry: names %q, plaintext %v", got, tel.AllowPlaintext)
	}
	if got := strings.Join(api.Transform.Names(), ","); got != "X-Api-Key,X-Team" || !api.AllowPlaintext {
		t.Errorf("api entry: names %q, plaintext %v", got, api.AllowPlaintext)
	}
	wantPins := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:5::/48"), netip.MustParsePrefix("203.0.113.7/32")}
	if fmt.Sprint(api.Addresses) != fmt.Sprint(wantPins) || tel.Addresses != nil {
		t.Errorf("addresses: api %v (want %v), telemetry %v (want none)", api.Addresses, wantPins, tel.Addresses)
	}
	var secrets []string
	for _, s := range append(tel.Transform.Secrets(), api.Transform.Secrets()...) {
		secrets = append(secrets, s.Reveal())
	}
	joined := strings.Join(secrets, "|")
	if !strings.Contains(joined, "tok-123") || !strings.Contains(joined, "s3cr3t-from-file") {
		t.Errorf("secrets not resolved (relative file paths are relative to the config file)")
	}
	if c.CACertFile != "testdata/ca.pem" || c.CAKeyFile != "testdata/ca-key.pem" {
		t.Errorf("ca = %q %q", c.CACertFile, c.CAKeyFile)
	}
}

// TestErrorsNeverCarrySecrets: a broken transform next to a resolved one
// must not print the resolved value.
func TestErrorsNeverCarrySecrets(t *testing.T) {
	const secret = "canary-7f3a9c-secret"
	t.Setenv("HOOKGATE_TEST_TOKEN", secret)
	_, err := Parse("x.yaml", []byte(`network:
  allowlist:
    - domain: a.example.com
      transform: {Authorization: "Bearer ${env:HOOKGATE_TEST_TOKEN}"}
    - domain: b.example.com
      transform: {Authorization: "Bearer ${env:HOOKGATE_TEST_TOKEN}", authorization: "x ${env:HOOKGATE_TEST_TOKEN}"}
    - domain: "*"
      transform: {X: "${env:HOOKGATE_TEST_TOKEN}"}
`), Options{})
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the secret: %v", err)
	}
}

func TestLoadOperations(t *testing.T) {
	c, err := Load("testdata/ops.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyListen != "" || c.TransparentListen != "0.0.0.0:15001" || c.DNSListen != "127.0.0.1:15053" || c.AdminListen != "" {
		t.Errorf("listen = %q %q %q %q", c.ProxyListen, c.TransparentListen, c.DNSListen, c.AdminListen)
	}
	if c.AdminTokenFile != "testdata/admin-token" || c.MaxConnections != 0 || c.MaxConnectionsPerClient != 16 || c.ShutdownGrace != 2*time.Second {
		t.Errorf("ops = %+v", c)
	}
	d, err := Load("testdata/good.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.AdminListen != DefaultAdminListen || d.MaxConnections != DefaultMaxConnections || d.ShutdownGrace != DefaultShutdownGrace {
		t.Errorf("defaults = %+v", d)
	}
}
