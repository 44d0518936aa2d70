package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestComposeTopology runs the docker-compose demo (docker-compose.yml,
// docs/deploy.md) without a container engine: the same three services, the
// same config files and the same scripts, in network namespaces.
//
//	"gateway" namespace   (203.0.113.1) examples/compose/gateway-entrypoint.sh
//	                      execs `gateway serve --config .../gateway.yaml
//	                      --redirect`; the sandbox shares the namespace, as
//	                      with network_mode: "service:gateway", and runs
//	                      examples/agent/agent.sh with no proxy variables and
//	                      no token.
//	"receiver" namespace  (203.0.113.2) examples/receiver on :443, as
//	                      telemetry.example.com.
//
// Docker's embedded DNS (127.0.0.11, which knows the service alias) is a DNS
// server of this test on 127.0.0.11:53 of the gateway namespace, named by
// /etc/netns/<ns>/resolv.conf: the gateway's own (marked) lookups reach it,
// the sandbox's are redirected to the gateway's DNS server.
//
// The files are laid out as in the image: <dir>/etc/hookgate/gateway.yaml
// (copied byte for byte), with ca and receiver-tls symlinks to the
// "volumes" <dir>/var/lib/hookgate/{ca,trust,receiver-tls}. The sandbox's
// root has .agents/hooks.json (copied byte for byte).
//
// Differences from the containers: everything runs as root (the sandbox is
// uid 10001 in compose) and in the test's mount and PID namespaces; the
// images are not built.
func TestComposeTopology(t *testing.T) {
	ip, curl := requireE2E(t)
	c := &composeHarness{t: t, ip: ip, curl: curl, root: repoRoot(t)}
	c.findTools()

	t.Run("check.sh", func(t *testing.T) {
		c.runCheckScript(t)
	})

	c.topo = setupNetns(t, ip)
	c.layout()
	c.startReceiver()
	c.startGateway()

	t.Run("entrypoint published the trust files", c.checkTrustFiles)
	t.Run("agent.sh", c.runAgent)
	t.Run("receiver got the token on every hook call", c.checkReceiverLog)
	t.Run("gateway injected the token and never logged it", c.checkGatewayDecisions)
	t.Run("sandbox environment has no token and no proxy", c.checkSandboxEnv)
	t.Run("sandbox cannot resolve a name not on the allowlist", c.checkSandboxDNS)
	t.Run("sandbox gets 403 from a host not on the allowlist", c.checkSandboxDenied)
	t.Run("sandbox cannot reach the admin API", c.checkSandboxAdmin)
	t.Run("receiver refuses a request without the token", c.checkReceiver401)
	t.Run("admin API from the receiver's namespace shows no secret", c.checkAdminAPI)
	t.Run("SIGTERM: gateway exits 0 and removes its rules", c.stopGateway)
	t.Run("receiver stops on SIGTERM", c.stopReceiver)
}

// The compose demo's names.
const (
	composeHost  = "telemetry.example.com"
	composeEnvID = "env_compose_demo"
	// embeddedDNSAddr is Docker's embedded DNS address.
	embeddedDNSAddr = "127.0.0.11:53"
	// composeAdmin is the admin API (listen.admin 0.0.0.0:9090) as seen
	// from the receiver's namespace.
	composeAdminPort = "9090"
)

// Bounds of this test's waits.
const (
	agentTimeout   = 3 * time.Minute  // agent.sh: seven `gateway hooks run` (-race builds) and a few python3
	checkTimeout   = 3 * time.Minute  // check.sh (docker-compose config, gateway check, hooks check)
	sandboxCmdWait = 30 * time.Second // one command in the sandbox
)

// sandboxPATH is the sandbox's PATH, as in the image.
var sandboxPATH = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

type composeHarness struct {
	t          *testing.T
	ip, curl   string
	root       string // the repository
	sh, python string
	path       string // the sandbox's PATH

	topo       *topology
	dir        string
	token      string // TELEMETRY_TOKEN, random per run
	etc        string // <dir>/etc/hookgate: gateway.yaml, ca -> , receiver-tls ->
	caDir      string // volume hookgate-ca
	trustDir   string // volume hookgate-trust
	rxTLSDir   string // volume receiver-tls
	sbRoot     string // the sandbox's "/": .agents/hooks.json
	workspace  string
	sbTmp      string
	sbHome     string
	receiverCA *x509.CertPool

	gwNS, upNS netns.NsHandle
	dns        *embeddedDNS
	receiver   *proc
	gateway    *proc
	agent      nsResult
}

// findTools finds what agent.sh runs besides the gateway: sh and python3
// (curl is checked by requireE2E).
func (c *composeHarness) findTools() {
	t := c.t
	var err error
	if c.sh, err = exec.LookPath("sh"); err != nil {
		skipOrFail(t, "no sh: %v", err)
	}
	if c.python, err = realPython(sandboxPATH); err != nil {
		skipOrFail(t, "no python3 (agent.sh needs it): %v", err)
	}
	dirs := slices.Clone(sandboxPATH)
	for _, tool := range []string{c.python, c.curl} {
		if d := filepath.Dir(tool); !slices.Contains(dirs, d) {
			dirs = append([]string{d}, dirs...)
		}
	}
	c.path = strings.Join(dirs, ":")
}

// runCheckScript runs examples/compose/check.sh, the CI check of the
// compose file. Without docker-compose it skips, except in CI (whose .ci/run
// installs it), where it fails.
func (c *composeHarness) runCheckScript(t *testing.T) {
	if _, err := exec.LookPath("docker-compose"); err != nil {
		skipOrFail(t, "docker-compose is not installed (apt-get install docker-compose): %v", err)
	}
	ctx, cancel := withTimeout(checkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.sh, filepath.Join(c.root, "examples", "compose", "check.sh"))
	cmd.Env = append(os.Environ(), "HOOKGATE_BIN="+gatewayBin)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("check.sh:\n%s", out)
	if err != nil {
		t.Fatalf("check.sh: %v (%v)", err, ctx.Err())
	}
	for _, want := range []string{"docker-compose.yml: OK", "gateway.yaml: OK", "hooks.json: OK", "scripts: OK"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check.sh did not say %q", want)
		}
	}
}

// layout makes the directories and copies the config files, writes the
// namespace's resolv.conf and hosts, and starts the embedded DNS.
func (c *composeHarness) layout() {
	t := c.t
	c.dir = t.TempDir()
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	c.token = "compose-e2e-" + hex.EncodeToString(tok)

	vol := filepath.Join(c.dir, "var", "lib", "hookgate")
	c.caDir = filepath.Join(vol, "ca")
	c.trustDir = filepath.Join(vol, "trust")
	c.rxTLSDir = filepath.Join(vol, "receiver-tls")
	c.etc = filepath.Join(c.dir, "etc", "hookgate")
	c.sbRoot = filepath.Join(c.dir, "sandbox-root")
	c.workspace = filepath.Join(c.dir, "workspace")
	c.sbTmp = filepath.Join(c.dir, "sandbox-tmp")
	c.sbHome = filepath.Join(c.dir, "sandbox-home")
	for _, d := range []string{c.caDir, c.trustDir, c.rxTLSDir, c.etc, c.workspace, c.sbTmp, c.sbHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// As in the image: /etc/hookgate/{ca,receiver-tls} are symlinks to the
	// volumes, and gateway.yaml names its files relative to itself.
	for name, target := range map[string]string{"ca": c.caDir, "receiver-tls": c.rxTLSDir} {
		if err := os.Symlink(target, filepath.Join(c.etc, name)); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, filepath.Join(c.root, "examples", "compose", "gateway.yaml"), filepath.Join(c.etc, "gateway.yaml"), 0o644)
	copyFile(t, filepath.Join(c.root, "examples", "compose", ".agents", "hooks.json"),
		filepath.Join(c.sbRoot, ".agents", "hooks.json"), 0o644)

	// Docker's resolv.conf in a compose network; hosts without the alias
	// (Docker resolves it by DNS only).
	setEtcNetns(t, c.topo.gwNS, map[string]string{
		"resolv.conf": "nameserver 127.0.0.11\noptions ndots:0\n",
		"hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	})
	var err error
	if c.gwNS, err = netns.GetFromName(c.topo.gwNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.gwNS.Close() })
	if c.upNS, err = netns.GetFromName(c.topo.upNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.upNS.Close() })
	c.dns = startEmbeddedDNS(t, c.gwNS, embeddedDNSAddr, map[string]netip.Addr{composeHost + ".": upstreamIP})
}

// startReceiver builds and runs examples/receiver in the receiver namespace
// with the environment of docker-compose.yml, and waits for its healthcheck
// (cert.pem written) and its port.
func (c *composeHarness) startReceiver() {
	t := c.t
	bin := buildReceiver(t, c.root, t.TempDir())
	env := []string{
		"PATH=" + c.path,
		"HOME=" + c.dir,
		"RECEIVER_TOKEN=" + c.token,
		"RECEIVER_LISTEN=:443",
		"RECEIVER_HOSTNAMES=" + composeHost,
		"RECEIVER_CERT_DIR=" + c.rxTLSDir,
	}
	c.receiver = startIn(t, c.ip, c.topo.upNS, "receiver", env, nil, bin)
	rxAddr := net.JoinHostPort(upstreamIP.String(), "443")
	var lastErr error
	ok := poll(startTimeout, func() bool {
		if c.receiver.exited() {
			return true
		}
		if fi, err := os.Stat(filepath.Join(c.rxTLSDir, "cert.pem")); err != nil || fi.Size() == 0 {
			lastErr = err
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := dialIn(ctx, c.upNS, "tcp", rxAddr)
		if err != nil {
			lastErr = err
			return false
		}
		_ = conn.Close()
		return true
	})
	if !ok || c.receiver.exited() {
		t.Fatalf("receiver not up on %s within %v (exited %v, %v; last error %v)\nstderr:\n%s",
			rxAddr, startTimeout, c.receiver.exited(), c.receiver.err, lastErr, c.receiver.stderr.String())
	}
	pem, err := os.ReadFile(filepath.Join(c.rxTLSDir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c.receiverCA = x509.NewCertPool()
	if !c.receiverCA.AppendCertsFromPEM(pem) {
		t.Fatalf("receiver cert.pem: no certificate")
	}
}

// startGateway runs the entrypoint, which makes the CA, publishes the trust
// files, waits for the receiver's certificate and execs `gateway serve
// --redirect`; then waits for the rules, the listeners and /readyz.
func (c *composeHarness) startGateway() {
	t := c.t
	env := []string{
		"PATH=" + c.path,
		"HOME=" + c.dir,
		"TELEMETRY_TOKEN=" + c.token,
		"HOOKGATE_BIN=" + gatewayBin,
		"HOOKGATE_CA_DIR=" + c.caDir,
		"HOOKGATE_TRUST_DIR=" + c.trustDir,
		"HOOKGATE_WAIT_FOR=" + filepath.Join(c.rxTLSDir, "cert.pem"),
		"HOOKGATE_WAIT_SECONDS=30",
		// The gateway must neither use nor pass these on.
		"HTTP_PROXY=" + poisonProxy, "HTTPS_PROXY=" + poisonProxy,
		"http_proxy=" + poisonProxy, "https_proxy=" + poisonProxy,
	}
	// The compose command, behind the image's entrypoint.
	c.gateway = startIn(t, c.ip, c.topo.gwNS, "gateway", env, nil,
		c.sh, filepath.Join(c.root, "examples", "compose", "gateway-entrypoint.sh"),
		gatewayBin, "serve", "--config", filepath.Join(c.etc, "gateway.yaml"), "--redirect")

	admin := clientIn(c.upNS, nil, nil)
	defer admin.CloseIdleConnections()
	readyURL := "http://" + net.JoinHostPort(gatewayIP.String(), composeAdminPort) + "/readyz"
	var lastErr error
	var table bool
	ok := poll(startTimeout, func() bool {
		if c.gateway.exited() {
			return true
		}
		if !hasLogMessage(c.gateway.stderr.String(), "gateway listening") {
			return false
		}
		var err error
		if table, err = tableInNetns(c.gwNS); err != nil || !table {
			lastErr = err
			return false
		}
		status, body, err := fetch(admin, "GET", readyURL, nil)
		if err != nil || status != http.StatusOK {
			lastErr = err
			if err == nil {
				lastErr = fmt.Errorf("readyz: %d %s", status, body)
			}
			return false
		}
		return true
	})
	if !ok || c.gateway.exited() {
		t.Fatalf("gateway not ready within %v (exited %v, %v; nft table: %v; last error %v)\nstderr:\n%s",
			startTimeout, c.gateway.exited(), c.gateway.err, table, lastErr, c.gateway.stderr.String())
	}
}

// checkTrustFiles: the entrypoint made the CA and published ca.pem and
// bundle.pem (system roots + the CA), never the key.
func (c *composeHarness) checkTrustFiles(t *testing.T) {
	stderr := c.gateway.stderr.String()
	for _, want := range []string{"hookgate-entrypoint: creating the gateway CA in " + c.caDir,
		"hookgate-entrypoint: published " + c.trustDir + "/ca.pem"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the entrypoint did not log %q:\n%s", want, stderr)
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(c.caDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(c.trustDir, "ca.pem"))
	if err != nil || !bytes.Equal(pub, caPEM) {
		t.Errorf("trust/ca.pem is not the CA's certificate (%v)", err)
	}
	bundle, err := os.ReadFile(filepath.Join(c.trustDir, "bundle.pem"))
	if err != nil || !bytes.HasSuffix(bundle, caPEM) {
		t.Errorf("trust/bundle.pem does not end with the CA's certificate (%v)", err)
	}
	if sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil && !bytes.HasPrefix(bundle, sys) {
		t.Errorf("trust/bundle.pem does not start with the system roots")
	}
	ents, err := os.ReadDir(c.trustDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"bundle.pem", "ca.pem"}) {
		t.Errorf("trust dir holds %v, want bundle.pem and ca.pem only", names)
	}
	if _, err := os.Stat(filepath.Join(c.caDir, "ca-key.pem")); err != nil {
		t.Errorf("the CA key: %v", err)
	}
}

// sandboxEnv is the sandbox service's environment in docker-compose.yml,
// with the paths of this test: no proxy variables, no token.
func (c *composeHarness) sandboxEnv() []string {
	bundle := filepath.Join(c.trustDir, "bundle.pem")
	return []string{
		"PATH=" + c.path,
		"HOME=" + c.sbHome,
		"TMPDIR=" + c.sbTmp,
		"SSL_CERT_FILE=" + bundle,
		"CURL_CA_BUNDLE=" + bundle,
		"REQUESTS_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + filepath.Join(c.trustDir, "ca.pem"),
		"ENVIRONMENT_ID=" + composeEnvID,
		// agent.sh's paths (container defaults: gateway, /workspace, /, /tmp/x).
		"HOOKGATE_BIN=" + gatewayBin,
		"AGENT_WORKSPACE=" + c.workspace,
		"HOOKS_ROOT=" + c.sbRoot,
		"AGENT_CANARY=" + filepath.Join(c.sbTmp, "x"),
		"AGENT_READY_SECONDS=30",
	}
}

// sandbox runs argv in the sandbox: the gateway's namespace, the sandbox's
// environment, the workspace as working directory.
func (c *composeHarness) sandbox(t *testing.T, argv ...string) nsResult {
	t.Helper()
	res := runInNetns(t, c.ip, c.topo.gwNS, c.sandboxEnv(), c.workspace, sandboxCmdWait, argv...)
	t.Logf("sandbox %q: exit %d\nstdout:\n%s\nstderr:\n%s", argv, res.exit, res.stdout, res.stderr)
	return res
}

// runAgent runs examples/agent/agent.sh in the sandbox.
func (c *composeHarness) runAgent(t *testing.T) {
	agent := filepath.Join(c.root, "examples", "agent", "agent.sh")
	c.agent = runInNetns(t, c.ip, c.topo.gwNS, c.sandboxEnv(), c.workspace, agentTimeout, c.sh, agent)
	res := c.agent
	t.Logf("agent.sh: exit %d\nstdout:\n%s", res.exit, res.stdout)
	if res.exit != 0 {
		t.Errorf("agent.sh exited %d, want 0\nstderr:\n%s\ngateway stderr:\n%s\nreceiver stderr:\n%s",
			res.exit, res.stderr, c.gateway.stderr.String(), c.receiver.stderr.String())
	}
	for _, want := range []string{
		"[agent] receiver reachable through the gateway: https://" + composeHost + "/healthz",
		"[agent] ALLOWED code_execution",
		"[agent] DENIED  code_execution",
		"reason: Destructive command blocked by security gate",
		"[agent] ALLOWED write_file",
		"[agent] ALLOWED read_file",
		"| written by the example agent in " + composeEnvID,
		"[agent] done: ls allowed, rm -rf denied by the security gate",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("agent.sh output lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.sbTmp, "x", "keep")); err != nil {
		t.Errorf("the canary of the denied rm -rf: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(c.workspace, "notes.txt")); err != nil ||
		string(b) != "written by the example agent in "+composeEnvID+"\n" {
		t.Errorf("workspace/notes.txt: %q, %v", b, err)
	}
	if strings.Contains(res.stdout+res.stderr, c.token) {
		t.Errorf("the token appears in the agent's output")
	}
	if strings.Contains(res.stderr, "DATA RACE") {
		t.Errorf("race in `gateway hooks run`:\n%s", res.stderr)
	}
}

// logLine is a JSON log line of the receiver or the gateway.
type logLine map[string]any

func (l logLine) str(k string) string {
	s, _ := l[k].(string)
	return s
}

func jsonLines(t *testing.T, stderr string, msg string) []logLine {
	t.Helper()
	var out []logLine
	logLines(t, stderr, func(_ string, f map[string]any) {
		if f["message"] == msg {
			out = append(out, f)
		}
	})
	return out
}

// checkReceiverLog: the gate's decisions, the audit lines, every request
// authorized (the gateway injected the token), the token never logged.
func (c *composeHarness) checkReceiverLog(t *testing.T) {
	// A request's line is written once its handler returned, which may be
	// just after the client had the answer.
	var stderr string
	poll(decisionTimeout, func() bool {
		stderr = c.receiver.stderr.String()
		return len(jsonLines(t, stderr, "request")) >= 6
	})
	var gate []string
	for _, l := range jsonLines(t, stderr, "decision") {
		if l.str("hook") != "pre-tool" || l.str("environment_id") != composeEnvID {
			t.Errorf("receiver decision line %v: want hook pre-tool, environment_id %s", l, composeEnvID)
		}
		gate = append(gate, l.str("tool")+" "+l.str("decision"))
	}
	if want := []string{"code_execution allow", "code_execution deny"}; !slices.Equal(gate, want) {
		t.Errorf("receiver gate decisions %q, want %q", gate, want)
	}
	var audit []string
	for _, l := range jsonLines(t, stderr, "audit") {
		if l.str("source") != "compose-sandbox" || l.str("environment_id") != composeEnvID || l.str("idempotency_key") == "" {
			t.Errorf("receiver audit line %v: want source compose-sandbox (hooks.json), environment_id %s, an Idempotency-Key",
				l, composeEnvID)
		}
		audit = append(audit, l.str("tool"))
	}
	if want := []string{"code_execution", "write_file", "read_file"}; !slices.Equal(audit, want) {
		t.Errorf("receiver audit lines for %q, want %q", audit, want)
	}
	if u := jsonLines(t, stderr, "unauthorized"); len(u) != 0 {
		t.Errorf("receiver refused %d requests for want of the token: %v", len(u), u)
	}
	paths := map[string]int{}
	for _, l := range jsonLines(t, stderr, "request") {
		if st, _ := l["status"].(float64); st != http.StatusOK {
			t.Errorf("receiver request line %v: want status 200", l)
		}
		paths[l.str("path")]++
	}
	if paths["/api/v1/pre-tool"] != 2 || paths["/api/v1/agent-events"] != 3 || paths["/healthz"] < 1 || len(paths) != 3 {
		t.Errorf("receiver requests by path %v, want 2 pre-tool, 3 agent-events, >= 1 healthz", paths)
	}
	if strings.Contains(stderr, c.token) {
		t.Errorf("the receiver logged the token")
	}
}

// decisions returns the gateway's decision lines for host.
func (c *composeHarness) decisions(t *testing.T, host string) []logLine {
	var out []logLine
	for _, l := range jsonLines(t, c.gateway.stderr.String(), "decision") {
		if l.str("host") == host {
			out = append(out, l)
		}
	}
	return out
}

// checkGatewayDecisions: one allowed, intercepted decision per request the
// receiver got, each naming the injected header, never the token.
func (c *composeHarness) checkGatewayDecisions(t *testing.T) {
	var decs []logLine
	requests := len(jsonLines(t, c.receiver.stderr.String(), "request"))
	poll(decisionTimeout, func() bool {
		decs = c.decisions(t, composeHost)
		return len(decs) >= requests
	})
	stderr := c.gateway.stderr.String()
	if len(decs) != requests {
		t.Errorf("%d gateway decision lines for %s, %d requests at the receiver", len(decs), composeHost, requests)
	}
	for _, d := range decs {
		inj, _ := d["injected"].([]any)
		// (No "transparent":true here: the MITM handler's decisions do not
		// carry it, even for connections from the transparent listener.)
		if d.str("verdict") != "allow" || d.str("mode") != "mitm" || d.str("sni") != composeHost ||
			len(inj) != 1 || inj[0] != "Authorization" {
			t.Errorf("decision line %v: want verdict allow, mode mitm, sni %s, injected [Authorization]", d, composeHost)
		}
		if d.str("upstream") != net.JoinHostPort(upstreamIP.String(), "443") {
			t.Errorf("decision line %v: want upstream %s:443", d, upstreamIP)
		}
	}
	if strings.Contains(stderr, c.token) {
		t.Errorf("the gateway logged the token")
	}
	// The gateway had the token in its environment (and the sandbox not:
	// checkSandboxEnv).
	env, err := fileEnv(c.gateway.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("the gateway's environment: %v", err)
	}
	if !slices.Contains(env, "TELEMETRY_TOKEN="+c.token) {
		t.Errorf("the gateway process has no TELEMETRY_TOKEN")
	}
	// The gateway resolved the receiver through "Docker's DNS".
	if q := c.dns.questions(); !slices.Contains(q, composeHost+". A") {
		t.Errorf("the embedded DNS was asked %q, want %s A (the gateway's lookup)", q, composeHost)
	}
}

// checkSandboxEnv: what the sandbox's processes see.
func (c *composeHarness) checkSandboxEnv(t *testing.T) {
	res := c.sandbox(t, c.sh, "-c", "env; echo pid $$")
	if res.exit != 0 {
		t.Fatalf("env in the sandbox: exit %d", res.exit)
	}
	for _, line := range scanLines(res.stdout) {
		k, _, _ := strings.Cut(line, "=")
		if strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			t.Errorf("proxy variable in the sandbox: %s", line)
		}
		if strings.Contains(k, "TOKEN") {
			t.Errorf("token variable in the sandbox: %s", line)
		}
	}
	if strings.Contains(res.stdout, c.token) {
		t.Errorf("the sandbox's environment holds the token")
	}
	// And it shares the gateway's namespace.
	inode := netnsInode(c.gwNS)
	if out := c.sandbox(t, "readlink", "/proc/self/ns/net"); strings.TrimSpace(out.stdout) != "net:["+strconv.FormatUint(inode, 10)+"]" {
		t.Errorf("sandbox namespace %q, want the gateway's net:[%d]", out.stdout, inode)
	}
}

// checkSandboxDNS: the docs' check, a lookup of a name not on the allowlist,
// fails; the query never reaches "Docker's DNS".
func (c *composeHarness) checkSandboxDNS(t *testing.T) {
	const name = "not-allowed.example.org"
	res := c.sandbox(t, c.python, "-c", `import socket; socket.getaddrinfo("`+name+`", 443)`)
	if res.exit == 0 {
		t.Errorf("%s resolved in the sandbox", name)
	}
	for _, q := range c.dns.questions() {
		if strings.Contains(q, "example.org") {
			t.Errorf("a name not on the allowlist reached the embedded DNS: %s", q)
		}
	}
	// The allowed name resolves, through the gateway's DNS server.
	res = c.sandbox(t, c.python, "-c", `import socket; print(sorted({a[4][0] for a in socket.getaddrinfo("`+composeHost+`", 443, socket.AF_INET)}))`)
	if res.exit != 0 || strings.TrimSpace(res.stdout) != "['"+upstreamIP.String()+"']" {
		t.Errorf("%s in the sandbox: exit %d, %q; want [%s]", composeHost, res.exit, res.stdout, upstreamIP)
	}
}

// checkSandboxDenied: a host not on the allowlist, aimed at the receiver's
// address, gets the gateway's 403 and never reaches the receiver.
func (c *composeHarness) checkSandboxDenied(t *testing.T) {
	before := len(jsonLines(t, c.receiver.stderr.String(), "request"))
	// docs/deploy.md's check, as written: the name is not resolved (the
	// gateway's DNS refuses it), or, were it resolved, the gateway's 403.
	res := c.sandbox(t, c.curl, "-q", "-sS", "-i", "--max-time", "10", "https://example.org/")
	if res.exit != 6 && !strings.Contains(strings.ToLower(res.stdout), "x-proxy-error: blocked-by-allowlist") {
		t.Errorf("curl https://example.org/ from the sandbox: exit %d, want \"could not resolve\" (6) or the gateway's 403", res.exit)
	}
	// Aimed at the receiver's address, the gateway's 403.
	res = c.sandbox(t, c.curl, "-q", "-sS", "-i", "--max-time", "10",
		"--resolve", "example.org:443:"+upstreamIP.String(), "https://example.org/")
	if !strings.Contains(res.stdout, " 403") || !strings.Contains(strings.ToLower(res.stdout), "x-proxy-error: blocked-by-allowlist") {
		t.Errorf("curl https://example.org/ from the sandbox: exit %d, want a 403 with X-Proxy-Error: blocked-by-allowlist", res.exit)
	}
	var decs []logLine
	poll(decisionTimeout, func() bool { decs = c.decisions(t, "example.org"); return len(decs) > 0 })
	if len(decs) != 1 || decs[0].str("verdict") != "deny" || decs[0].str("code") != "blocked-by-allowlist" {
		t.Errorf("decision lines for example.org: %v, want one deny blocked-by-allowlist", decs)
	}
	if after := len(jsonLines(t, c.receiver.stderr.String(), "request")); after != before {
		t.Errorf("the receiver got %d requests from the denied one", after-before)
	}
}

// checkSandboxAdmin: the admin API (0.0.0.0:9090) is not reachable from the
// sandbox: its connections are redirected to the transparent listener,
// which refuses the gateway's own addresses.
func (c *composeHarness) checkSandboxAdmin(t *testing.T) {
	for _, host := range []string{"127.0.0.1", gatewayIP.String()} {
		u := "http://" + net.JoinHostPort(host, composeAdminPort) + "/v1/decisions"
		res := c.sandbox(t, c.curl, "-q", "-sS", "-i", "--max-time", "10", u)
		if !strings.HasPrefix(res.stdout, "HTTP/1.1 403") || !strings.Contains(strings.ToLower(res.stdout), "x-proxy-error: blocked-") ||
			strings.Contains(res.stdout, composeHost) {
			t.Errorf("%s from the sandbox: exit %d, want the gateway's 403 with X-Proxy-Error\n%s", u, res.exit, res.stdout)
		}
	}
}

// checkReceiver401: the control, from the receiver's own namespace: without
// the gateway there is no token, and the receiver answers 401.
func (c *composeHarness) checkReceiver401(t *testing.T) {
	before := len(jsonLines(t, c.receiver.stderr.String(), "unauthorized"))
	cl := clientIn(c.upNS, c.receiverCA, map[string]string{composeHost + ":443": net.JoinHostPort(upstreamIP.String(), "443")})
	defer cl.CloseIdleConnections()
	status, body, err := fetch(cl, "POST", "https://"+composeHost+"/api/v1/pre-tool",
		http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusUnauthorized {
		t.Errorf("POST /api/v1/pre-tool without the token: %d %s, want 401", status, body)
	}
	var u []logLine
	poll(decisionTimeout, func() bool {
		u = jsonLines(t, c.receiver.stderr.String(), "unauthorized")
		return len(u) > before
	})
	if len(u) != before+1 {
		t.Errorf("receiver logged %d unauthorized lines for the request without token, want 1", len(u)-before)
	}
}

// checkAdminAPI: reachable from outside the namespace (docker-compose
// publishes it); decisions, config and metrics name the header, not the
// token.
func (c *composeHarness) checkAdminAPI(t *testing.T) {
	cl := clientIn(c.upNS, nil, nil)
	defer cl.CloseIdleConnections()
	base := "http://" + net.JoinHostPort(gatewayIP.String(), composeAdminPort)
	for _, p := range []string{"/healthz", "/readyz", "/v1/decisions?limit=100", "/v1/config", "/metrics"} {
		status, body, err := fetch(cl, "GET", base+p, nil)
		if err != nil {
			t.Errorf("GET %s: %v", p, err)
			continue
		}
		if status != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, status, body)
		}
		if bytes.Contains(body, []byte(c.token)) {
			t.Errorf("GET %s shows the token", p)
		}
		if p == "/v1/decisions?limit=100" {
			var recs []struct {
				Host     string   `json:"host"`
				Verdict  string   `json:"verdict"`
				Injected []string `json:"injected"`
			}
			if err := json.Unmarshal(body, &recs); err != nil {
				t.Errorf("decisions: %v: %s", err, body)
			}
			n := 0
			for _, r := range recs {
				if r.Host == composeHost && r.Verdict == "allow" && slices.Equal(r.Injected, []string{"Authorization"}) {
					n++
				}
			}
			if want := len(c.decisions(t, composeHost)); n != want {
				t.Errorf("/v1/decisions has %d injected decisions for %s, the log %d", n, composeHost, want)
			}
		}
	}
}

// stopGateway: SIGTERM, exit 0, and the nftables table is gone.
func (c *composeHarness) stopGateway(t *testing.T) {
	if err := c.gateway.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to the gateway: %v", err)
	}
	if !c.gateway.wait(stopTimeout) {
		t.Fatalf("gateway did not exit within %v of SIGTERM", stopTimeout)
	}
	stderr := c.gateway.stderr.String()
	if c.gateway.err != nil {
		t.Errorf("gateway exit after SIGTERM: %v, want status 0\n%s", c.gateway.err, stderr)
	}
	if !hasLogMessage(stderr, "stopped") {
		t.Errorf("no \"stopped\" line from the gateway:\n%s", stderr)
	}
	if strings.Contains(stderr, "DATA RACE") {
		t.Errorf("race in the gateway:\n%s", stderr)
	}
	exists, err := tableInNetns(c.gwNS)
	if err != nil {
		t.Fatalf("reading the nftables tables of %s: %v", c.topo.gwNS, err)
	}
	if exists {
		t.Errorf("nftables table %q still in the gateway's namespace after exit", "hookgate")
	}
}

// stopReceiver: the receiver shuts down cleanly too.
func (c *composeHarness) stopReceiver(t *testing.T) {
	if err := c.receiver.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to the receiver: %v", err)
	}
	if !c.receiver.wait(stopTimeout) {
		t.Fatalf("receiver did not exit within %v of SIGTERM", stopTimeout)
	}
	if c.receiver.err != nil || !hasLogMessage(c.receiver.stderr.String(), "receiver stopped") {
		t.Errorf("receiver after SIGTERM: %v\n%s", c.receiver.err, c.receiver.stderr.String())
	}
	if strings.Contains(c.receiver.stderr.String(), "DATA RACE") {
		t.Errorf("race in the receiver:\n%s", c.receiver.stderr.String())
	}
}
