package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sandbox's sinkhole address (its link's IPv4 address).
const sinkholeIP = "169.254.77.1"

// TestSandboxSinkhole: with network.dns.denied: sinkhole, a denied name
// resolves to the sinkhole address inside the sandbox, so that tools
// connect and read the gateway's 403 naming the rule instead of "could not
// resolve host"; and the sinkhole address opens nothing.
func TestSandboxSinkhole(t *testing.T) {
	h := newSandboxHarness(t)
	base := readFile(t, h.cfg)
	h.cfg = writeVariant(t, h.dir, "sinkhole.yaml", base,
		`dns: {servers: ["203.0.113.2:53"]}`, `dns: {servers: ["203.0.113.2:53"], denied: sinkhole}`)

	t.Run("a denied name resolves to the sinkhole", func(t *testing.T) {
		recs := len(h.records(t))
		res := h.exec(t, h.self, "dns", "denied.test")
		if got := strings.TrimSpace(res.stdout); got != "NOERROR "+sinkholeIP {
			t.Errorf("DNS denied.test from the sandbox: %q, want NOERROR %s (stderr %q)", got, sinkholeIP, res.stderr)
		}
		if qs := dnsQueries(h.records(t)[recs:], "denied.test"); len(qs) > 0 {
			t.Errorf("the upstream resolver was asked about a denied name: %v", qs)
		}
		if !strings.Contains(res.log, `"verdict":"sinkhole"`) {
			t.Errorf("no sinkhole decision in the log:\n%s", res.log)
		}
	})

	t.Run("an allowed name resolves as always", func(t *testing.T) {
		res := h.exec(t, h.self, "dns", "allowed.test")
		if got := strings.TrimSpace(res.stdout); got != "NOERROR "+upstreamIP.String() {
			t.Errorf("DNS allowed.test from the sandbox: %q", got)
		}
	})

	for _, c := range []struct{ name, url string }{
		{"http", "http://denied.test/"},
		{"https", "https://denied.test/"},
	} {
		t.Run("curl "+c.name+" to a denied name reads the 403", func(t *testing.T) {
			recs := len(h.records(t))
			// No --resolve: the sandbox's own DNS lookup leads the way.
			res := h.exec(t, h.curl, "-sS", "--max-time", "10", "-D", "-", c.url)
			if res.exit != 0 || !strings.Contains(res.stdout, " 403") ||
				!strings.Contains(strings.ToLower(res.stdout), "x-proxy-error: blocked-by-allowlist") ||
				!strings.Contains(res.stdout, "denied.test is not on the allowlist") {
				t.Errorf("curl: exit %d, want the readable 403 naming the rule; stdout:\n%s\nstderr: %s", res.exit, res.stdout, res.stderr)
			}
			for _, r := range h.records(t)[recs:] {
				t.Errorf("a denied request reached the upstream: %s", r)
			}
			decs := decisionLines(t, res.log)
			if len(decs) != 1 || decs[0].Host != "denied.test" || decs[0].Verdict != "deny" || decs[0].Code != "blocked-by-allowlist" {
				t.Errorf("decision lines:\n%swant one deny of denied.test", rawLines(decs))
			}
		})
	}

	t.Run("an allowed name aimed at the sinkhole is dialled by name", func(t *testing.T) {
		recs := len(h.records(t))
		res := h.exec(t, h.curl, "-sS", "--max-time", "10",
			"--resolve", "allowed.test:80:"+sinkholeIP, "http://allowed.test/via-sinkhole")
		if res.exit != 0 || !strings.Contains(res.stdout, "upstream saw allowed.test /via-sinkhole") {
			t.Errorf("curl: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		if reqs := kinds(h.records(t)[recs:], "http"); len(reqs) != 1 {
			t.Errorf("upstream got %v, want the one request", reqs)
		}
	})

	// Even with every host allowed and link-local re-opened, the sinkhole
	// address itself is never dialled: it is the gateway's own.
	open := writeVariant(t, h.dir, "sinkhole-open.yaml", base,
		`dns: {servers: ["203.0.113.2:53"]}`, `dns: {servers: ["203.0.113.2:53"], denied: sinkhole}
  allow_cidrs: [169.254.0.0/16]`)
	open = writeVariant(t, h.dir, "sinkhole-open.yaml", readFile(t, open),
		"    - domain: mixed.test\n", "    - domain: mixed.test\n    - domain: \"*\"\n")
	t.Run("the sinkhole address opens nothing", func(t *testing.T) {
		defer func(cfg string) { h.cfg = cfg }(h.cfg)
		h.cfg = open
		for _, u := range []string{"http://" + sinkholeIP + "/", "https://" + sinkholeIP + "/"} {
			recs := len(h.records(t))
			res := h.exec(t, h.curl, "-sS", "--max-time", "10", "-k", "-D", "-", u)
			if strings.Contains(res.stdout, "upstream saw") {
				t.Errorf("%s: the sandbox got an upstream answer: %q", u, res.stdout)
			}
			for _, r := range h.records(t)[recs:] {
				t.Errorf("%s reached the upstream: %s", u, r)
			}
			decs := decisionLines(t, res.log)
			if len(decs) != 1 || decs[0].Verdict != "deny" || decs[0].Code != "blocked-by-address-policy" {
				t.Errorf("%s: decision lines:\n%swant one deny by the address policy", u, rawLines(decs))
			}
		}
	})
}

// writeVariant writes base with old replaced by new (which must occur) to
// dir/name and returns its path.
func writeVariant(t *testing.T, dir, name, base, old, new string) string {
	t.Helper()
	if !strings.Contains(base, old) {
		t.Fatalf("config lacks %q:\n%s", old, base)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Replace(base, old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
