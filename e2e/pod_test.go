package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/kubeletvolume"
	"github.com/vishvananda/netns"
)

// TestPodSidecar emulates the agent pod of deploy/kubernetes/sidecar: one
// network namespace (the pod's) holding `gateway serve --redirect --watch`
// as root and an agent process under another UID with no capabilities and
// no proxy settings. The gateway's config and its token live in
// directories written the way the kubelet writes ConfigMap and Secret
// volumes (timestamped directory, ..data symlink swapped atomically). While
// the agent loops over HTTPS requests (bounded), the token is rotated and
// then the config: no request fails, each change is used from the request
// after the swap on, and the gateway is never restarted.
//
//	"gateway" namespace   (203.0.113.1) the pod: gateway + agent (uid 65534)
//	"upstream" namespace  (203.0.113.2) HTTPS allowed.test and DNS
func TestPodSidecar(t *testing.T) {
	ip, curl := requireE2E(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		skipOrFail(t, "no setpriv (util-linux) to run the agent as another user: %v", err)
	}
	h := &harness{t: t, ip: ip, curl: curl}
	h.topo = setupNetns(t, ip)
	h.dir = t.TempDir()
	h.caPath, h.pool = writeCerts(t, h.dir)
	h.startUpstream()
	p := newPod(t, h, setpriv)

	p.secret.Write(t, map[string]string{"token": p.token(1) + "\n"})
	p.config.Write(t, map[string]string{"gateway.yaml": p.gatewayConfig("")})
	p.startGateway()
	p.startAgent()

	p.waitUpstream("the first token", func(r record) bool { return r.Header.Get("Authorization") == "Bearer "+p.token(1) })

	// The Secret is updated: the next requests carry the new token.
	p.secret.Write(t, map[string]string{"token": p.token(2) + "\n"})
	p.waitUpstream("the rotated token", func(r record) bool { return r.Header.Get("Authorization") == "Bearer "+p.token(2) })

	// The ConfigMap is updated: a header added to the transform appears.
	p.config.Write(t, map[string]string{"gateway.yaml": p.gatewayConfig("v2")})
	p.waitUpstream("the new config", func(r record) bool { return r.Header.Get("X-Pod-Config") == "v2" })

	p.stopAgent()
	t.Run("no request failed and no tunnel was dropped", p.checkAgent)
	t.Run("each change applied from the next request on", p.checkOrder)
	t.Run("one generation per change, in metrics and decision lines", p.checkGenerations)
	t.Run("no token in the gateway's log", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			if strings.Contains(p.gateway.stderr.String(), p.token(i)) {
				t.Fatalf("token %d appears in the gateway's log", i)
			}
		}
	})
	t.Run("SIGTERM: the gateway exits 0", p.stopGateway)
	t.Run("without the gateway the agent has no way out", p.checkFailClosed)
}

// Bounds of the pod test.
const (
	agentRounds   = 300 // curl invocations of the agent at most
	agentPerRound = 10  // requests per invocation, over one connection
	agentUID      = 65534
	podAdminPort  = "9090"
	rotateTimeout = 30 * time.Second
)

// pod is the emulated pod.
type pod struct {
	t       *testing.T
	h       *harness
	setpriv string
	run     string // random per run, in the tokens
	caDir   string // the gateway's CA (a Secret volume in the pod)
	trust   string // the CA bundle ConfigMap: ca.pem
	stop    string // the agent stops when this file exists
	config  *kubeletvolume.Volume
	secret  *kubeletvolume.Volume
	gateway *proc
	agent   *proc
}

func newPod(t *testing.T, h *harness, setpriv string) *pod {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	p := &pod{t: t, h: h, setpriv: setpriv, run: hex.EncodeToString(b),
		caDir: filepath.Join(h.dir, "ca"), trust: filepath.Join(h.dir, "trust"), stop: filepath.Join(h.dir, "stop-agent"),
		config: &kubeletvolume.Volume{Dir: filepath.Join(h.dir, "config")}, secret: &kubeletvolume.Volume{Dir: filepath.Join(h.dir, "secret")}}
	for _, d := range []string{p.trust, p.config.Dir, p.secret.Dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The agent (uid 65534) reads the trust bundle and looks for the stop
	// file: t.TempDir makes 0700 directories.
	for _, d := range []string{filepath.Dir(h.dir), h.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run(gatewayBin, "ca", "init", "--dir", p.caDir); err != nil {
		t.Fatalf("gateway ca init: %v\n%s", err, out)
	}
	copyFile(t, filepath.Join(p.caDir, "ca.pem"), filepath.Join(p.trust, "ca.pem"), 0o644)
	// The pod's resolv.conf names a cluster DNS address (one the pod has a
	// route to, as a pod has to its cluster DNS); the redirect takes
	// the agent's queries to the gateway's DNS server.
	setEtcNetns(t, h.topo.gwNS, map[string]string{
		"resolv.conf": "nameserver 203.0.113.53\noptions ndots:0\n",
		"hosts":       "127.0.0.1\tlocalhost\n",
	})
	return p
}

func (p *pod) token(i int) string { return fmt.Sprintf("pod-e2e-%s-token-%d", p.run, i) }

// gatewayConfig is the sidecar's config (as in
// deploy/kubernetes/sidecar/gateway-config.yaml, with the test's paths
// and DNS server); version, when set, is sent as X-Pod-Config.
func (p *pod) gatewayConfig(version string) string {
	extra := ""
	if version != "" {
		extra = fmt.Sprintf(", X-Pod-Config: %q", version)
	}
	return fmt.Sprintf(`listen:
  proxy: ""
  transparent: 0.0.0.0:15001
  dns: 127.0.0.1:15053
  admin: 0.0.0.0:%s
network:
  allowlist:
    - domain: allowed.test
      transform: {Authorization: "Bearer ${file:%s}"%s}
  dns: {servers: ["%s:53"]}
upstream: {ca_file: %q}
ca: {cert_file: %q, key_file: %q}
limits: {shutdown_grace: 5s}
`, podAdminPort, filepath.Join(p.secret.Dir, "token"), extra, upstreamIP, p.h.caPath,
		filepath.Join(p.caDir, "ca.pem"), filepath.Join(p.caDir, "ca-key.pem"))
}

// startGateway runs the sidecar's command and waits for what the pod's
// startup probe waits for: /readyz, which answers once the redirect rules
// are in and every listener is up.
func (p *pod) startGateway() {
	t := p.t
	env := []string{"PATH=" + os.Getenv("PATH"), "HTTP_PROXY=" + poisonProxy, "HTTPS_PROXY=" + poisonProxy}
	p.gateway = startIn(t, p.h.ip, p.h.topo.gwNS, "gateway", env, nil,
		gatewayBin, "serve", "--config", filepath.Join(p.config.Dir, "gateway.yaml"), "--redirect", "--keep-rules", "--watch")
	admin := p.adminClient()
	defer admin.CloseIdleConnections()
	var lastErr error
	ok := poll(startTimeout, func() bool {
		if p.gateway.exited() {
			return true
		}
		status, body, err := fetch(admin, "GET", p.adminURL("/readyz"), nil)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("readyz: %d %s", status, body)
		}
		lastErr = err
		return err == nil
	})
	if !ok || p.gateway.exited() {
		t.Fatalf("gateway not ready within %v (exited %v, %v; last error %v)\nstderr:\n%s",
			startTimeout, p.gateway.exited(), p.gateway.err, lastErr, p.gateway.stderr.String())
	}
}

// adminClient reaches the admin API as the kubelet's probes do: from
// outside the pod (the upstream namespace stands in for the node).
func (p *pod) adminClient() *http.Client {
	ns, err := netns.GetFromName(p.h.topo.upNS)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = ns.Close() })
	return clientIn(ns, nil, nil)
}

func (p *pod) adminURL(path string) string {
	return "http://" + net.JoinHostPort(gatewayIP.String(), podAdminPort) + path
}

// startAgent runs the agent: uid 65534, no capabilities, no proxy
// variables, only the CA bundle; curl over HTTPS in rounds of requests on
// one connection each, until the stop file appears (bounded).
func (p *pod) startAgent() {
	script := `id -u
i=0
while [ "$i" -lt "$ROUNDS" ] && [ ! -e "$STOP" ]; do
  curl -sS --max-time 10 -w '%{http_code} %{num_connects}\n' "$@" || echo "curl-exit $?"
  i=$((i+1))
done
echo agent-done`
	args := []string{p.setpriv, "--reuid=" + fmt.Sprint(agentUID), "--regid=" + fmt.Sprint(agentUID), "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "sh", "-c", script, "agent"}
	for i := 0; i < agentPerRound; i++ {
		args = append(args, "-o", "/dev/null", "https://allowed.test/pod")
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=/", "CURL_CA_BUNDLE=" + filepath.Join(p.trust, "ca.pem"),
		"STOP=" + p.stop, "ROUNDS=" + fmt.Sprint(agentRounds)}
	p.agent = startIn(p.t, p.h.ip, p.h.topo.gwNS, "agent", env, nil, args...)
}

// waitUpstream waits until the upstream has had a request that matches.
func (p *pod) waitUpstream(what string, match func(record) bool) {
	t := p.t
	t.Helper()
	ok := poll(rotateTimeout, func() bool {
		if p.agent.exited() {
			return true
		}
		for _, r := range p.podRequests() {
			if match(r) {
				return true
			}
		}
		return false
	})
	if !ok || p.agent.exited() {
		t.Fatalf("waiting for %s: not seen within %v (agent exited: %v)\nagent stdout:\n%s\nagent stderr:\n%s\ngateway stderr:\n%s",
			what, rotateTimeout, p.agent.exited(), p.agent.stdout.String(), p.agent.stderr.String(), p.gateway.stderr.String())
	}
}

// podRequests are the agent's requests as the upstream got them, in order.
func (p *pod) podRequests() []record {
	recs, err := readRecords(filepath.Join(p.h.dir, recordsFile))
	if err != nil {
		p.t.Fatal(err)
	}
	var out []record
	for _, r := range recs {
		if r.Kind == "http" && r.URI == "/pod" {
			out = append(out, r)
		}
	}
	return out
}

func (p *pod) stopAgent() {
	if err := os.WriteFile(p.stop, nil, 0o644); err != nil {
		p.t.Fatal(err)
	}
	if !p.agent.wait(2 * time.Minute) {
		p.t.Fatal("the agent did not stop")
	}
}

// checkAgent: the agent ran as 65534; every request got 200; within a
// round no connection was made after the first (no tunnel was closed
// under it, rotations included).
func (p *pod) checkAgent(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(p.agent.stdout.String()), "\n")
	if p.agent.err != nil || len(lines) < 2 || lines[0] != fmt.Sprint(agentUID) || lines[len(lines)-1] != "agent-done" {
		t.Fatalf("agent: %v\nstdout:\n%s\nstderr:\n%s", p.agent.err, p.agent.stdout.String(), p.agent.stderr.String())
	}
	results := lines[1 : len(lines)-1]
	if len(results) == 0 || len(results)%agentPerRound != 0 {
		t.Fatalf("agent printed %d results, want whole rounds of %d:\n%s", len(results), agentPerRound, p.agent.stdout.String())
	}
	for i, r := range results {
		want := "200 0"
		if i%agentPerRound == 0 {
			want = "200 1"
		}
		if r != want {
			t.Fatalf("request %d: %q, want %q (status, connections made)\nagent stderr:\n%s", i, r, want, p.agent.stderr.String())
		}
	}
	if got := len(p.podRequests()); got != len(results) {
		t.Errorf("the upstream got %d requests, the agent made %d", got, len(results))
	}
	t.Logf("%d requests, %d rounds", len(results), len(results)/agentPerRound)
}

// checkOrder: once a request carried the new token (the new config), no
// later one carried the old.
func (p *pod) checkOrder(t *testing.T) {
	newToken, newConfig := false, false
	for i, r := range p.podRequests() {
		auth := r.Header.Get("Authorization")
		switch auth {
		case "Bearer " + p.token(2):
			newToken = true
		case "Bearer " + p.token(1):
			if newToken {
				t.Fatalf("request %d carried the old token after the new one", i)
			}
		default:
			t.Fatalf("request %d carried an unexpected Authorization", i)
		}
		if v := r.Header.Get("X-Pod-Config"); v == "v2" {
			newConfig = true
		} else if newConfig {
			t.Fatalf("request %d lacks the new config's header after it appeared", i)
		}
	}
}

// checkGenerations: two changes, two reloads: generation 3 in /metrics,
// and the last decision line names it.
func (p *pod) checkGenerations(t *testing.T) {
	admin := p.adminClient()
	defer admin.CloseIdleConnections()
	_, body, err := fetch(admin, "GET", p.adminURL("/metrics"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hookgate_config_generation 3\n", `hookgate_reloads_total{result="ok"} 2` + "\n", `hookgate_reloads_total{result="error"} 0` + "\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
	var last map[string]any
	logLines(t, p.gateway.stderr.String(), func(_ string, fields map[string]any) {
		if fields["message"] == "decision" && fields["mode"] == "mitm" {
			last = fields
		}
	})
	if last == nil {
		t.Fatal("no decision line of an intercepted request")
	}
	if g, _ := last["generation"].(float64); g != 3 {
		t.Errorf("the last decision line names generation %v, want 3: %v", last["generation"], last)
	}
}

func (p *pod) stopGateway(t *testing.T) {
	if err := p.gateway.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.gateway.wait(stopTimeout) {
		t.Fatalf("the gateway did not stop within %v", stopTimeout)
	}
	if p.gateway.err != nil {
		t.Fatalf("the gateway exited with %v", p.gateway.err)
	}
}

// checkFailClosed: the gateway ran with --keep-rules, so after it exits
// its rules are still in the pod's namespace and the agent's connection to
// the upstream (by address: no DNS either) is refused, not let out.
func (p *pod) checkFailClosed(t *testing.T) {
	ns, err := netns.GetFromName(p.h.topo.gwNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if table, err := tableInNetns(ns); err != nil || !table {
		t.Fatalf("the redirect rules are gone after the gateway exited (%v)", err)
	}
	res := runInNetns(t, p.h.ip, p.h.topo.gwNS, []string{"PATH=" + os.Getenv("PATH")}, "/", sandboxCmdWait,
		p.setpriv, "--reuid="+fmt.Sprint(agentUID), "--regid="+fmt.Sprint(agentUID), "--clear-groups", "--inh-caps=-all",
		p.h.curl, "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "http://"+upstreamIP.String()+"/")
	if res.exit != 7 { // couldn't connect
		t.Fatalf("the agent's request with the gateway gone: exit %d, stdout %q, stderr %q; want curl's 7 (connection refused)", res.exit, res.stdout, res.stderr)
	}
	recs, err := readRecords(filepath.Join(p.h.dir, recordsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Kind == "http" && r.URI == "/" {
			t.Fatalf("the upstream got the request made without the gateway: %s", r)
		}
	}
}
