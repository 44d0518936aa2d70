package config

import (
	"bytes"
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
// (for JSON, which has no comments: the file NAME.want) says which error
// (file:line: field: message) it must produce.
func TestLoadBad(t *testing.T) {
	yamls, err := filepath.Glob("testdata/bad/*.yaml")
	jsons, _ := filepath.Glob("testdata/bad/*.json")
	if err != nil || len(yamls) < 10 || len(jsons) < 2 {
		t.Fatalf("testdata/bad: %v (%d YAML, %d JSON files)", err, len(yamls), len(jsons))
	}
	for _, f := range append(yamls, jsons...) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := wantedError(t, f)
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
			if strings.HasSuffix(f, ".json") && strings.Contains(strings.ToLower(err.Error()), "yaml") {
				t.Errorf("an error about a JSON file talks of YAML: %v", err)
			}
		})
	}
}

func wantedError(t *testing.T, file string) string {
	t.Helper()
	if strings.HasSuffix(file, ".json") {
		data, err := os.ReadFile(file + ".want")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	want, ok := strings.CutPrefix(first, "# want: ")
	if !ok {
		t.Fatalf("%s: first line must be '# want: <error>'", file)
	}
	return want
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml", Options{})
	if err == nil || !strings.Contains(err.Error(), "testdata/does-not-exist.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// TestAllErrorsReported: one pass reports every problem, not just the first,
// in file order, each once: unknown fields, wrong types and invalid values
// together.
func TestAllErrorsReported(t *testing.T) {
	_, err := Parse("multi.yaml", []byte(`network:
  allowlist:
    - domain: 5
    - domian: b.example.com
    - domain: "bad domain"
  allow_cidrs: [bad, 0.0.0.0/0]
limits:
  max_connections: lots
log:
  level: loud
`), Options{})
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want Errors, got %v", err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%d %s", e.Line, e.Field))
	}
	want := []string{
		"3 network.allowlist[0].domain",
		"4 network.allowlist[1].domian",
		"4 network.allowlist[1].domain", // the entry has no domain
		"5 network.allowlist[2].domain",
		"6 network.allow_cidrs[0]",
		"6 network.allow_cidrs[1]",
		"8 limits.max_connections",
		"10 log.level",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%v\nwant (line field):\n%s", err, strings.Join(want, "\n"))
	}
}

func TestFileSizeCap(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	data := []byte("log: {level: info}\n# " + strings.Repeat("x", MaxFileSize) + "\n")
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, load := range map[string]func() error{
		"Load":  func() error { _, err := Load(big, Options{}); return err },
		"Parse": func() error { _, err := Parse(big, data, Options{}); return err },
	} {
		err := load()
		if err == nil || !strings.Contains(err.Error(), big+": larger than 16 MiB") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// Exactly at the cap is fine.
	atCap := append([]byte("log: {level: info}\n# "), bytes.Repeat([]byte("x"), MaxFileSize-len("log: {level: info}\n# "))...)
	if _, err := Parse("cap.yaml", atCap, Options{}); err != nil {
		t.Errorf("a file of exactly MaxFileSize bytes: %v", err)
	}
}

// TestUnreachableEntriesWarn: entries naming loopback or a blocked address
// load, with a warning saying they can never be reached.
func TestUnreachableEntriesWarn(t *testing.T) {
	c, err := Parse("w.yaml", []byte(`network:
  allowlist:
    - domain: api.example.com
    - domain: 127.0.0.1
    - domain: 169.254.169.254
    - domain: localhost
    - domain: "[::1]"
    - domain: 10.1.2.3
    - domain: 10.20.0.5
    - domain: 192.0.2.1
  allow_cidrs: [10.20.0.0/16]
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := []string{
		"w.yaml:4: network.allowlist[1].domain: 127.0.0.1 is loopback, which the gateway never dials: this entry can never be reached",
		"w.yaml:5: network.allowlist[2].domain: 169.254.169.254 is cloud metadata, which the gateway does not dial unless network.allow_cidrs re-opens it: this entry can never be reached",
		"w.yaml:6: network.allowlist[3].domain: localhost is loopback, which the gateway never dials: this entry can never be reached",
		"w.yaml:7: network.allowlist[4].domain: ::1 is loopback, which the gateway never dials: this entry can never be reached",
		"w.yaml:8: network.allowlist[5].domain: 10.1.2.3 is private, which the gateway does not dial unless network.allow_cidrs re-opens it: this entry can never be reached",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSchemaTypesAccepted: values of the right type, in every form YAML
// and JSON write them, still load.
func TestSchemaTypesAccepted(t *testing.T) {
	for name, doc := range map[string]string{
		"quoted number as domain": "network: {allowlist: [{domain: \"5.example\"}]}",
		"tagged string":           "network: {allowlist: [{domain: !!str api.example.com}]}",
		"empty sections":          "network:\nlimits:\nlog:\n",
		"anchors":                 "network:\n  allowlist:\n    - &e {domain: a.example.com}\n  allow_cidrs: &c [10.1.0.0/16]\n",
		"json":                    `{"limits": {"max_connections": 5}, "network": {"allowlist": [{"domain": "a.example.com"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse("ok.yaml", []byte(doc), Options{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	bad, _ := filepath.Glob("testdata/bad/*.*")
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
	if c.AdminTokenFile != "testdata/admin-token" || !c.AdminPprof || c.MaxConnections != 0 || c.MaxConnectionsPerClient != 16 || c.ShutdownGrace != 2*time.Second {
		t.Errorf("ops = %+v", c)
	}
	d, err := Load("testdata/good.json", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.AdminListen != DefaultAdminListen || d.AdminPprof || d.MaxConnections != DefaultMaxConnections || d.ShutdownGrace != DefaultShutdownGrace {
		t.Errorf("defaults = %+v", d)
	}
}
