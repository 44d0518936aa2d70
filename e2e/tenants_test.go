package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// The two sandboxes of the tenants test, each in a namespace of its own
// linked to the gateway's namespace, with a default route through it.
var tenantSandboxes = []struct {
	tag, gwAddr, addr, tenant, token string
}{
	{"sa", "198.51.100.1", "198.51.100.2", "sandbox-a", "hg-canary-e2e-token-a-5e1f"},
	{"sb", "198.51.100.5", "198.51.100.6", "sandbox-b", "hg-canary-e2e-token-b-c3d7"},
}

// tenantsConfig: plain HTTP to allowed.test gets each tenant's own token;
// a client of no tenant gets nothing (auth.required).
const tenantsConfig = `listen: {proxy: "", transparent: "0.0.0.0:15001", admin: ""}
ca: {cert_file: ca/ca.pem, key_file: ca/ca-key.pem}
auth: {required: true}
network:
  allowlist: []
  dns: {servers: ["203.0.113.2:53"]}
tenants:
  - name: sandbox-a
    clients: [198.51.100.2/32]
    network:
      allowlist:
        - {domain: allowed.test, allow_plaintext: true, transform: {X-Tenant-Token: "${env:HG_E2E_TOKEN_A}"}}
  - name: sandbox-b
    clients: [198.51.100.6/32]
    network:
      allowlist:
        - {domain: allowed.test, allow_plaintext: true, transform: {X-Tenant-Token: "${env:HG_E2E_TOKEN_B}"}}
log: {level: info}
`

// TestTenantsTransparentInNetns: two sandboxes whose TCP is redirected to
// one gateway's transparent listener are told apart by their source
// address: each request gets its own tenant's token, and a client of no
// tenant is refused with nothing sent upstream.
func TestTenantsTransparentInNetns(t *testing.T) {
	ip, curl := requireE2E(t)
	nft, err := exec.LookPath("nft")
	if err != nil {
		skipOrFail(t, "no nft command: %v", err)
	}
	h := &harness{t: t, ip: ip, curl: curl}
	h.topo = setupNetns(t, ip)
	h.dir = t.TempDir()
	h.caPath, h.pool = writeCerts(t, h.dir)
	h.startUpstream()
	devs := addSandboxNetns(t, ip, h.topo.gwNS)
	rules := fmt.Sprintf(`table ip hg_e2e_tenants {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname { "%s", "%s" } tcp dport 80 redirect to :15001
	}
}
`, devs[0], devs[1])
	rulesFile := filepath.Join(h.dir, "tenants.nft")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ip, "netns", "exec", h.topo.gwNS, nft, "-f", rulesFile); err != nil {
		skipOrFail(t, "installing the redirect rules: %v", err)
	}
	h.startTenantGateway(t)

	for _, sb := range tenantSandboxes {
		out, err := run(ip, "netns", "exec", "hg-e2e-"+sb.tag+"-"+strconv.Itoa(os.Getpid()), curl, "-sS", "-i", "--max-time", "10",
			"--resolve", "allowed.test:80:"+upstreamIP.String(), "http://allowed.test/"+sb.tenant)
		if err != nil || !strings.HasPrefix(out, "HTTP/1.1 200") || !strings.Contains(out, "upstream saw allowed.test /"+sb.tenant) {
			t.Fatalf("%s: %v\n%s", sb.tenant, err, out)
		}
		var got []string
		for _, r := range kinds(h.records(t), "http") {
			if r.URI == "/"+sb.tenant {
				got = append(got, r.Header.Values("X-Tenant-Token")...)
			}
		}
		if len(got) != 1 || got[0] != sb.token {
			t.Fatalf("%s: the upstream got %d tokens, want its own one", sb.tenant, len(got))
		}
	}

	// A client of no tenant: the gateway's own namespace, from loopback.
	before := len(kinds(h.records(t), "http"))
	out, err := run(ip, "netns", "exec", h.topo.gwNS, curl, "-sS", "-i", "--max-time", "10",
		"-H", "Host: allowed.test", "http://127.0.0.1:15001/nobody")
	if err != nil || !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "blocked-by-allowlist") {
		t.Fatalf("a client of no tenant: %v\n%s", err, out)
	}
	if n := len(kinds(h.records(t), "http")); n != before {
		t.Fatal("a client of no tenant reached the upstream")
	}

	var tenants []string
	if !poll(decisionTimeout, func() bool {
		tenants = tenants[:0]
		logLines(t, h.gateway.stderr.String(), func(_ string, f map[string]any) {
			if f["message"] == "decision" && f["mode"] == "http" {
				tenants = append(tenants, fmt.Sprint(f["tenant"]))
			}
		})
		return len(tenants) >= 3
	}) {
		t.Fatalf("decision lines: %v", tenants)
	}
	if strings.Join(tenants, " ") != "sandbox-a sandbox-b <nil>" {
		t.Errorf("the decision lines' tenants: %v", tenants)
	}
	for _, sb := range tenantSandboxes {
		if strings.Contains(h.gateway.stderr.String(), sb.token) {
			t.Errorf("the gateway's log holds %s's token", sb.tenant)
		}
	}
}

// addSandboxNetns makes the sandboxes' namespaces, each linked to gwNS by a
// veth pair; it returns the gateway-side interface names.
func addSandboxNetns(t *testing.T, ip, gwNS string) []string {
	t.Helper()
	pid := strconv.Itoa(os.Getpid())
	var devs []string
	for _, sb := range tenantSandboxes {
		ns := "hg-e2e-" + sb.tag + "-" + pid
		gwDev, sbDev := "hg-g"+sb.tag+"-"+pid, "hg-"+sb.tag+"-"+pid
		if _, err := run(ip, "netns", "add", ns); err != nil {
			skipOrFail(t, "creating network namespace: %v", err)
		}
		t.Cleanup(func() {
			if _, err := run(ip, "netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		steps := [][]string{
			{"link", "add", gwDev, "netns", gwNS, "type", "veth", "peer", "name", sbDev, "netns", ns},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", gwNS, "addr", "add", sb.gwAddr + "/30", "dev", gwDev},
			{"-n", ns, "addr", "add", sb.addr + "/30", "dev", sbDev},
			{"-n", gwNS, "link", "set", gwDev, "up"},
			{"-n", ns, "link", "set", sbDev, "up"},
			{"-n", ns, "route", "add", "default", "via", sb.gwAddr},
		}
		for _, s := range steps {
			if _, err := run(ip, s...); err != nil {
				skipOrFail(t, "configuring the sandbox namespaces: %v", err)
			}
		}
		devs = append(devs, gwDev)
	}
	return devs
}

// startTenantGateway runs `gateway serve` with tenantsConfig in the
// gateway namespace and waits until its transparent listener accepts.
func (h *harness) startTenantGateway(t *testing.T) {
	t.Helper()
	if _, err := run(gatewayBin, "ca", "init", "--dir", filepath.Join(h.dir, "ca")); err != nil {
		t.Fatalf("gateway ca init: %v", err)
	}
	cfg := filepath.Join(h.dir, "tenants.yaml")
	if err := os.WriteFile(cfg, []byte(tenantsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"),
		"HG_E2E_TOKEN_A=" + tenantSandboxes[0].token, "HG_E2E_TOKEN_B=" + tenantSandboxes[1].token}
	h.gateway = startIn(t, h.ip, h.topo.gwNS, "gateway", env, nil, gatewayBin, "serve", "--config", cfg)
	gwNS, err := netns.GetFromName(h.topo.gwNS)
	if err != nil {
		t.Fatalf("opening namespace %s: %v", h.topo.gwNS, err)
	}
	defer gwNS.Close()
	up := poll(startTimeout, func() bool {
		if h.gateway.exited() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := dialIn(ctx, gwNS, "tcp", "127.0.0.1:15001")
		if err != nil {
			return false
		}
		_ = c.Close()
		return hasLogMessage(h.gateway.stderr.String(), "gateway listening")
	})
	if !up || h.gateway.exited() {
		t.Fatalf("gateway not listening within %v (exited: %v)\nstderr:\n%s", startTimeout, h.gateway.exited(), h.gateway.stderr.String())
	}
}
