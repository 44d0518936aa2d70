package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/hookgate/hookgate/internal/testlog"
)

// sandboxSecret is the token the gateway injects; the sandbox never has it.
const sandboxSecret = "e2e-sandbox-secret-7d1f0c"

// sandboxConfig: www.allowed.test gets the token (MITM with our CA),
// allowed.test is plain allowed, the rest as in gatewayConfig. %s are the
// upstream CA (the test CA) and the gateway CA's cert and key.
const sandboxConfig = `listen: {proxy: 127.0.0.1:3128}
network:
  allowlist:
    - domain: allowed.test
    - domain: www.allowed.test
      transform:
        Authorization: "Bearer ${env:E2E_TOKEN}"
    - domain: loopback.test
    - domain: metadata.test
    - domain: mixed.test
  dns: {servers: ["203.0.113.2:53"]}
upstream: {ca_file: %q}
ca: {cert_file: %q, key_file: %q}
log: {level: info}
`

// sandboxTimeout bounds one `gateway sandbox exec` run, all included.
const sandboxTimeout = 60 * time.Second

// sandboxHarness runs `gateway sandbox exec` inside the gateway test
// namespace, so that the gateway's "host" namespace is that one.
type sandboxHarness struct {
	*harness
	cfg    string
	tmp    string // the gateway's TMPDIR (where its CA bundles go)
	ws     string // the command's workspace, owned by sandboxUID
	self   string // a copy of this test binary the sandbox's user can run: the sandbox client
	upNS   netns.NsHandle
	before nsState
}

// sandboxResult is one run.
type sandboxResult struct {
	stdout, stderr string
	exit           int
	log            string // the gateway's log
}

func TestSandboxExec(t *testing.T) {
	h := newSandboxHarness(t)
	curl := h.curl

	t.Run("transform host gets the injected header", func(t *testing.T) {
		recs := len(h.records(t))
		res := h.exec(t, curl, "-sS", "--max-time", "10", "https://www.allowed.test/inject")
		if res.exit != 0 || !strings.Contains(res.stdout, "upstream saw www.allowed.test /inject") {
			t.Fatalf("curl: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		reqs := kinds(h.records(t)[recs:], "http")
		if len(reqs) != 1 || !reqs[0].TLS || reqs[0].Header.Get("Authorization") != "Bearer "+sandboxSecret {
			t.Errorf("upstream got %v, want one TLS request with the injected Authorization", reqs)
		}
		decs := decisionLines(t, res.log)
		if len(decs) != 1 || decs[0].Host != "www.allowed.test" || decs[0].Verdict != "allow" {
			t.Errorf("decision lines:\n%swant one allow of www.allowed.test", rawLines(decs))
		}
		if strings.Contains(res.log, sandboxSecret) {
			t.Errorf("the gateway logged the secret:\n%s", res.log)
		}
	})

	t.Run("plain http to an allowed host", func(t *testing.T) {
		res := h.exec(t, curl, "-sS", "--max-time", "10", "http://allowed.test/plain")
		if res.exit != 0 || !strings.Contains(res.stdout, "upstream saw allowed.test /plain") {
			t.Errorf("curl: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
	})

	t.Run("https to an allowed host is an opaque tunnel", func(t *testing.T) {
		// The upstream's own certificate: the gateway did not intercept.
		res := h.exec(t, curl, "-sS", "--max-time", "10", "--cacert", h.caPath, "https://allowed.test/tunnel")
		if res.exit != 0 || !strings.Contains(res.stdout, "upstream saw allowed.test /tunnel") {
			t.Errorf("curl: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
	})

	t.Run("ipv6 connection is redirected too", func(t *testing.T) {
		recs := len(h.records(t))
		res := h.exec(t, curl, "-sS", "--max-time", "10", "-g",
			"--resolve", "allowed.test:80:[2001:db8::7]", "http://allowed.test/v6")
		if res.exit != 0 || !strings.Contains(res.stdout, "upstream saw allowed.test /v6") {
			t.Errorf("curl over IPv6: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		if reqs := kinds(h.records(t)[recs:], "http"); len(reqs) != 1 {
			t.Errorf("upstream got %v, want the one request (the gateway dials the name, over IPv4)", reqs)
		}
	})

	// Denials: the sandbox aims at the upstream's address itself (--resolve),
	// so only the gateway's policy stands between them.
	denials := []struct {
		name, url, resolve, code string
	}{
		{"denied host over http", "http://denied.test/", "denied.test:80:203.0.113.2", "blocked-by-allowlist"},
		{"denied host over https", "https://denied.test/", "denied.test:443:203.0.113.2", "blocked-by-allowlist"},
		{"blocked address over http", "http://metadata.test/", "metadata.test:80:203.0.113.2", "blocked-by-address-policy"},
		{"blocked address over https", "https://loopback.test/", "loopback.test:443:203.0.113.2", "blocked-by-address-policy"},
		{"blocked address over ipv6", "http://mixed.test/", "mixed.test:80:[2001:db8::7]", "blocked-by-address-policy"},
	}
	for _, c := range denials {
		t.Run(c.name+" gets the readable 403", func(t *testing.T) {
			recs := len(h.records(t))
			res := h.exec(t, curl, "-sS", "--max-time", "10", "-g", "-D", "-",
				"--resolve", c.resolve, c.url)
			if !strings.Contains(res.stdout, " 403") || !strings.Contains(strings.ToLower(res.stdout), "x-proxy-error: "+c.code) {
				t.Errorf("curl: exit %d, want a 403 with X-Proxy-Error %s; stdout:\n%s\nstderr: %s", res.exit, c.code, res.stdout, res.stderr)
			}
			for _, r := range h.records(t)[recs:] {
				if r.Kind != "dns" {
					t.Errorf("denied request reached the upstream: %s", r)
				}
			}
			host := strings.SplitN(c.resolve, ":", 2)[0]
			decs := decisionLines(t, res.log)
			if len(decs) != 1 || decs[0].Host != host || decs[0].Verdict != "deny" || decs[0].Code != c.code {
				t.Errorf("decision lines:\n%swant one deny of %s with code %s", rawLines(decs), host, c.code)
			}
		})
	}

	t.Run("dns", func(t *testing.T) {
		for _, c := range []struct {
			name, want string
			upstream   bool // the upstream resolver is asked
		}{
			{"allowed.test", "NOERROR " + upstreamIP.String(), true},
			{"denied.test", "REFUSED", false},
			{"metadata.test", "REFUSED", true}, // resolves to a blocked address
			{"not-listed.example", "REFUSED", false},
		} {
			t.Run(c.name, func(t *testing.T) {
				recs := len(h.records(t))
				res := h.exec(t, h.self, "dns", c.name)
				if got := strings.TrimSpace(res.stdout); got != c.want {
					t.Errorf("DNS %s from the sandbox: %q, want %q (stderr %q)", c.name, got, c.want, res.stderr)
				}
				qs := dnsQueries(h.records(t)[recs:], c.name)
				if c.upstream != (len(qs) > 0) {
					t.Errorf("upstream resolver saw %v; want a query: %v", qs, c.upstream)
				}
			})
		}
	})

	t.Run("udp to a TEST-NET address does not get through", func(t *testing.T) {
		tap := tapUDP(t, h.upNS, "203.0.113.2:9999")
		res := h.exec(t, h.self, "udp", "203.0.113.2:9999")
		if !strings.HasPrefix(strings.TrimSpace(res.stdout), "no reply") {
			t.Errorf("sandbox udp probe: %q", res.stdout)
		}
		// Control: from the gateway namespace the tap is reachable.
		if err := onThreadIn(h.gwNS, func() error {
			c, err := net.Dial("udp", "203.0.113.2:9999")
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("control"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		poll(2*time.Second, func() bool { return tap.hits.Load() >= 1 })
		if n := tap.hits.Load(); n != 1 {
			t.Errorf("udp tap got %d datagrams, want only the control one", n)
		}
	})

	t.Run("tcp that is not http or tls does not get through", func(t *testing.T) {
		for _, addr := range []string{"203.0.113.2:5432", "203.0.113.2:80"} {
			recs := len(h.records(t))
			res := h.exec(t, h.self, "tcp", addr, `\x00\x01not http\n`)
			if strings.Contains(res.stdout, "upstream") {
				t.Errorf("%s: the sandbox got an upstream answer: %q", addr, res.stdout)
			}
			for _, r := range h.records(t)[recs:] {
				t.Errorf("%s: reached the upstream: %s", addr, r)
			}
			if !strings.Contains(res.log, "blocked-by-protocol") {
				t.Errorf("%s: no blocked-by-protocol decision in the log:\n%s", addr, res.log)
			}
		}
	})

	t.Run("the gateway's own ports are out of reach", func(t *testing.T) {
		// Stand-ins for the explicit proxy and an admin port, in the
		// gateway's namespace, on loopback and on its veth address.
		taps := []*tapListener{
			tapTCP(t, h.gwNS, "127.0.0.1:3128"),
			tapTCP(t, h.gwNS, gatewayIP.String()+":3128"),
			tapTCP(t, h.gwNS, "127.0.0.1:9901"),
		}
		for _, addr := range []string{"127.0.0.1:3128", gatewayIP.String() + ":3128", "127.0.0.1:9901"} {
			h.exec(t, h.self, "tcp", addr, `CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n`)
		}
		res := h.exec(t, curl, "-sS", "--max-time", "10", "--proxy", "http://127.0.0.1:3128", "http://allowed.test/via-explicit")
		t.Logf("curl --proxy 127.0.0.1:3128 from the sandbox: exit %d, %q", res.exit, firstLine(res.stdout))
		for _, tap := range taps {
			if n := tap.hits.Load(); n != 0 {
				t.Errorf("%s in the gateway's namespace got %d connections from the sandbox", tap.name, n)
			}
		}
	})

	t.Run("environment: no secret, no proxy, the CA bundle", func(t *testing.T) {
		res := h.exec(t, "sh", "-c", `env; for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS CURL_CA_BUNDLE GIT_SSL_CAINFO; do eval "f=\$$v"; grep -c "BEGIN CERTIFICATE" "$f" | sed "s/^/certs $v /"; done`)
		if strings.Contains(res.stdout, sandboxSecret) || strings.Contains(res.stdout, "E2E_TOKEN") {
			t.Errorf("the sandbox's environment has the secret:\n%s", res.stdout)
		}
		for _, line := range scanLines(res.stdout) {
			k, _, _ := strings.Cut(line, "=")
			if strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
				t.Errorf("proxy variable in the sandbox: %s", line)
			}
		}
		for _, v := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"} {
			if !strings.Contains(res.stdout, "certs "+v+" ") {
				t.Errorf("%s: no readable bundle:\n%s", v, res.stdout)
			}
		}
	})

	t.Run("exit status", func(t *testing.T) {
		if res := h.exec(t, "sh", "-c", "exit 7"); res.exit != 7 {
			t.Errorf("exit %d, want 7", res.exit)
		}
		if res := h.exec(t, "sh", "-c", "kill -USR1 $$"); res.exit != 128+int(syscall.SIGUSR1) {
			t.Errorf("exit %d, want %d", res.exit, 128+int(syscall.SIGUSR1))
		}
	})

	t.Run("reference audit scenario", func(t *testing.T) {
		recs := len(h.records(t))
		script := `curl -sS --max-time 10 -X POST -H 'Content-Type: application/json' ` +
			`--data "{\"event\":\"PreToolUse\",\"tool\":\"Bash\",\"sandbox_token\":\"${E2E_TOKEN:-none}\"}" ` +
			`"https://www.allowed.test/telemetry?sandbox_token=${E2E_TOKEN:-none}"`
		res := h.exec(t, "sh", "-c", script)
		if res.exit != 0 || !strings.Contains(res.stdout, "upstream saw www.allowed.test /telemetry") {
			t.Fatalf("POST from the sandbox: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		reqs := kinds(h.records(t)[recs:], "http")
		if len(reqs) != 1 {
			t.Fatalf("receiver got %v, want one request", reqs)
		}
		r := reqs[0]
		if r.Method != "POST" || r.Header.Get("Authorization") != "Bearer "+sandboxSecret {
			t.Errorf("receiver got %s, want a POST with the secret the gateway injected", r)
		}
		if r.URI != "/telemetry?sandbox_token=none" {
			t.Errorf("receiver got URI %q: the sandbox had a token of its own", r.URI)
		}
	})

	t.Run("confinement", h.confinementCases)
	t.Run("loopback", h.loopbackCases)

	t.Run("cleanup after a normal exit", func(t *testing.T) {
		res := h.exec(t, "true")
		var ready readyLine
		logLines(t, res.log, func(_ string, f map[string]any) {
			if f["message"] == "sandbox ready" {
				ready.Inode = uint64(f["netns_inode"].(float64))
			}
		})
		h.checkClean(t, ready.Inode)
	})

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run("cleanup after "+sig.String()+" to the gateway", func(t *testing.T) {
			h.signalRun(t, sig)
		})
	}
}

// deniedProbe, run after an escape attempt in the same shell, prints the
// status a request to a denied host gets: 403 as long as the redirect holds.
const deniedProbe = `; rc=$?; curl -sS -o /dev/null -w 'probe %{http_code}\n' --max-time 10 --resolve denied.test:80:203.0.113.2 http://denied.test/probe; exit $rc`

// confinementCases: the command has no capabilities, no_new_privs, the
// default user, a PID namespace and /proc of its own; every way out of the
// namespace it tries fails, and the redirect still holds afterwards, while
// ordinary work (the workspace) goes on.
func (h *sandboxHarness) confinementCases(t *testing.T) {
	requireTools(t, "nft", "nsenter", "unshare", "python3", "id")
	gwNetns := "/run/netns/" + h.topo.gwNS // the gateway's namespace, by name
	pyTry := func(code string) string {
		return `python3 -c 'import socket, sys
try:
    ` + code + `
except PermissionError as e:
    print("denied:", e); sys.exit(1)
print("allowed"); sys.exit(0)'`
	}

	t.Run("no capabilities, no_new_privs, the default user", func(t *testing.T) {
		res := h.exec(t, "sh", "-c", `id -u; id -g; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status`)
		want := fmt.Sprintf("%d\n%d\n", sandboxUID, sandboxUID) +
			"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" +
			"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
		if res.exit != 0 || res.stdout != want {
			t.Errorf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", res.exit, res.stdout, want, res.stderr)
		}
	})

	t.Run("--user", func(t *testing.T) {
		res := h.execWith(t, []string{"--user", "0"}, "sh", "-c", `id -u; grep -E '^(CapEff|CapBnd):' /proc/self/status`)
		if want := "0\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"; res.exit != 0 || res.stdout != want {
			t.Errorf("--user 0: exit %d, stdout %q, want %q", res.exit, res.stdout, want)
		}
		if !strings.Contains(res.log, "runs as ROOT inside the sandbox") {
			t.Errorf("--user 0 without the warning:\n%s", res.log)
		}
	})

	t.Run("a PID namespace and /proc of its own", func(t *testing.T) {
		res := h.exec(t, "sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; ls -d /proc/[0-9]* | wc -l`)
		lines := scanLines(res.stdout)
		if len(lines) != 2 || !strings.Contains(lines[0], "sandbox __init") {
			t.Fatalf("PID 1 of the sandbox: %q, want the sandbox's init", res.stdout)
		}
		if n, err := strconv.Atoi(lines[1]); err != nil || n > 5 {
			t.Errorf("the sandbox sees %s processes in /proc, want only its own few", lines[1])
		}
	})

	t.Run("the workspace is writable", func(t *testing.T) {
		res := h.exec(t, "sh", "-c", `echo work > result.txt && cat result.txt`)
		if res.exit != 0 || res.stdout != "work\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
		}
		st, err := os.Stat(filepath.Join(h.ws, "result.txt"))
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != sandboxUID {
			t.Errorf("result.txt in the workspace: %v, %v; want it owned by %d", st, err, sandboxUID)
		}
	})

	// want, if set, must be in stdout: the attempt ran and was refused (not,
	// say, failed to start).
	escapes := []struct{ name, script, want string }{
		{"nsenter into the gateway's namespace",
			`nsenter --net=` + gwNetns + ` curl -sS --max-time 5 http://203.0.113.2/escape-nsenter`, ""},
		{"nsenter through every /proc entry",
			`for p in /proc/[0-9]*; do nsenter --net=$p/ns/net curl -sS --max-time 5 http://203.0.113.2/escape-proc && exit 0; done; exit 1`, ""},
		{"nsenter from a new user namespace",
			`unshare --user --map-root-user nsenter --net=` + gwNetns + ` curl -sS --max-time 5 http://203.0.113.2/escape-userns`, ""},
		{"unshare -n", `unshare -n curl -sS --max-time 5 http://203.0.113.2/escape-unshare`, ""},
		{"nft flush ruleset", `nft flush ruleset`, ""},
		{"nft delete table", `nft delete table inet hookgate`, ""},
		{"ip route add", `ip route add 203.0.113.0/24 dev hg0`, ""},
		{"ip link down", `ip link set hg0 down`, ""},
		{"raw socket", pyTry(`socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)`), "denied:"},
		{"packet socket", pyTry(`socket.socket(socket.AF_PACKET, socket.SOCK_RAW)`), "denied:"},
		// 36 is SO_MARK, 0x6867 the gateway's own mark in shared-namespace mode.
		{"SO_MARK", pyTry(`socket.socket().setsockopt(socket.SOL_SOCKET, 36, 0x6867)`), "denied:"},
		// Typing into the terminal of the (root) shell that ran the gateway:
		// refused before the terminal is even looked at (stdin is no tty
		// here, which would be ENOTTY).
		{"TIOCSTI", pyTry(`import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b"x")`), "denied:"},
	}
	for _, c := range escapes {
		t.Run("escape: "+c.name, func(t *testing.T) {
			recs := len(h.records(t))
			res := h.exec(t, "sh", "-c", "("+c.script+")"+deniedProbe)
			if res.exit == 0 {
				t.Errorf("the attempt succeeded: stdout %q, stderr %q", res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout, c.want) {
				t.Errorf("stdout %q, want %q (stderr %q)", res.stdout, c.want, res.stderr)
			}
			if !strings.Contains(res.stdout, "probe 403") {
				t.Errorf("after the attempt a denied host got %q, want 403: the redirect no longer holds", res.stdout)
			}
			for _, r := range h.records(t)[recs:] {
				if r.Kind != "dns" {
					t.Errorf("the upstream was reached: %s", r)
				}
			}
			t.Logf("stderr: %s", strings.TrimSpace(res.stderr))
		})
	}
}

// loopbackCases: the sandbox's own loopback servers work, on 127.0.0.1 and
// ::1, and the gateway's listeners, reachable on that loopback, still apply
// the policy.
func (h *sandboxHarness) loopbackCases(t *testing.T) {
	t.Run("servers of the sandbox on loopback", func(t *testing.T) {
		res := h.exec(t, h.self, "loopback")
		lines := scanLines(res.stdout)
		if res.exit != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ok 127.0.0.1:") || !strings.HasPrefix(lines[1], "ok [::1]:") {
			t.Errorf("exit %d, stdout %q, want ok for 127.0.0.1 and ::1", res.exit, res.stdout)
		}
	})
	t.Run("curl to a server of the sandbox", func(t *testing.T) {
		script := `python3 -m http.server --bind 127.0.0.1 8000 >/dev/null 2>&1 & ` +
			`curl -sS -o /dev/null -w '%{http_code}\n' --retry 20 --retry-connrefused --retry-delay 1 --max-time 30 http://127.0.0.1:8000/`
		res := h.exec(t, "sh", "-c", script)
		if res.exit != 0 || strings.TrimSpace(res.stdout) != "200" {
			t.Errorf("exit %d, stdout %q, stderr %q; want 200 from the sandbox's own server", res.exit, res.stdout, res.stderr)
		}
	})
	listener := "127.0.0.1:15001" // the transparent listener, in the sandbox's namespace
	for _, c := range []struct{ name, script string }{
		{"a denied Host to the transparent listener",
			`curl -sS -D - -o /dev/null --max-time 10 -H 'Host: denied.test' http://` + listener + `/direct`},
		{"a denied SNI to the transparent listener",
			`curl -sS -D - -o /dev/null --max-time 10 --resolve denied.test:15001:127.0.0.1 https://denied.test:15001/direct`},
		{"the transparent listener as a proxy",
			`curl -sS -D - -o /dev/null --max-time 10 --proxy http://` + listener + ` http://denied.test/direct`},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs := len(h.records(t))
			res := h.exec(t, "sh", "-c", c.script)
			if !strings.Contains(res.stdout, " 403") {
				t.Errorf("exit %d, stdout %q, stderr %q; want a 403", res.exit, res.stdout, res.stderr)
			}
			for _, r := range h.records(t)[recs:] {
				if r.Kind != "dns" {
					t.Errorf("the upstream was reached: %s", r)
				}
			}
		})
	}
}

// requireTools skips, or fails under CI, when a tool the test runs in the
// sandbox is missing.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "no %s command: %v", tool, err)
		}
	}
}

// setup writes the configs and the gateway CA, makes what the sandbox's
// unprivileged user needs reachable (see prepareForUser), and opens the
// namespaces.
// newSandboxHarness starts the namespaces, the test upstream and the
// sandbox's config for a test of `sandbox exec` (skipping without root
// outside CI).
func newSandboxHarness(t *testing.T) *sandboxHarness {
	t.Helper()
	ip, curl := requireE2E(t)
	h := &sandboxHarness{harness: &harness{t: t, ip: ip, curl: curl}}
	h.topo = setupNetns(t, ip)
	h.dir = t.TempDir()
	h.caPath, h.pool = writeCerts(t, h.dir)
	h.startUpstream()
	h.setup()
	return h
}

func (h *sandboxHarness) setup() {
	t := h.t
	var err error
	h.prepareForUser()
	caDir := filepath.Join(h.dir, "gateway-ca")
	if out, err := run(gatewayBin, "ca", "init", "--dir", caDir); err != nil {
		t.Fatalf("gateway ca init: %v\n%s", err, out)
	}
	h.cfg = filepath.Join(h.dir, "sandbox.yaml")
	cfg := fmt.Sprintf(sandboxConfig, h.caPath, filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "ca-key.pem"))
	if err := os.WriteFile(h.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runEnv([]string{"E2E_TOKEN=" + sandboxSecret}, gatewayBin, "check", "--config", h.cfg); err != nil {
		t.Fatalf("gateway check: %v\n%s", err, out)
	}
	h.tmp = filepath.Join(h.dir, "tmp")
	if err := os.Mkdir(h.tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if h.gwNS, err = netns.GetFromName(h.topo.gwNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.gwNS.Close() })
	if h.upNS, err = netns.GetFromName(h.topo.upNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.upNS.Close() })
	h.before = snapshotNS(t, h.ip, h.topo.gwNS, h.gwNS, h.tmp)
	t.Logf("gateway namespace before: %s", h.before)
}

// gatewayEnv is the gateway's environment: the secret it injects, proxy
// variables it must neither use nor pass on, and the client switch.
func (h *sandboxHarness) gatewayEnv() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + h.dir,
		"TMPDIR=" + h.tmp,
		"E2E_TOKEN=" + sandboxSecret,
		"HTTP_PROXY=" + poisonProxy, "https_proxy=" + poisonProxy, "ALL_PROXY=" + poisonProxy, "no_proxy=*",
		sandboxClientEnv + "=1",
	}
}

// exec runs `gateway sandbox exec -- argv` in the gateway namespace, as
// the default user (nobody: the harness has no SUDO_UID), and waits for
// it, bounded.
func (h *sandboxHarness) exec(t *testing.T, argv ...string) sandboxResult {
	t.Helper()
	return h.execWith(t, nil, argv...)
}

// execWith is exec with more flags for `gateway sandbox exec`.
func (h *sandboxHarness) execWith(t *testing.T, flags []string, argv ...string) sandboxResult {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	args := append([]string{"netns", "exec", h.topo.gwNS, gatewayBin, "sandbox", "exec",
		"--config", h.cfg, "--log", logPath, "--workspace", h.ws}, flags...)
	args = append(append(args, "--"), argv...)
	ctx, cancel := withTimeout(sandboxTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.ip, args...)
	cmd.Env = h.gatewayEnv()
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr testlog.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := sandboxResult{stdout: stdout.String(), stderr: stderr.String()}
	if b, rerr := os.ReadFile(logPath); rerr == nil {
		res.log = string(b)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.exit = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.exit = 128 + int(ws.Signal())
		}
	default:
		t.Fatalf("gateway sandbox exec %q: %v\nstderr:\n%s\nlog:\n%s", argv, err, res.stderr, res.log)
	}
	if strings.Contains(res.stderr+res.log, "DATA RACE") {
		t.Errorf("race in the gateway:\n%s%s", res.stderr, res.log)
	}
	t.Logf("sandbox exec %q: exit %d, stdout %q", argv, res.exit, firstLine(res.stdout))
	if t.Failed() {
		t.Logf("stderr:\n%s\nlog:\n%s", res.stderr, res.log)
	}
	return res
}

// signalRun starts a long command in the sandbox, sends sig to the
// gateway, and checks that the command and everything else is gone.
func (h *sandboxHarness) signalRun(t *testing.T, sig syscall.Signal) {
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	p := startIn(t, h.ip, h.topo.gwNS, "gateway sandbox exec", h.gatewayEnv(), nil,
		gatewayBin, "sandbox", "exec", "--config", h.cfg, "--log", logPath, "--grace", "5s",
		"--workspace", h.ws, "--", "sleep", "60")
	ready := waitReady(t, logPath, p)
	if procs := procsInNetns(ready.Inode); len(procs) == 0 {
		t.Fatalf("no process in the sandbox namespace (inode %d) while the command runs", ready.Inode)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if !p.wait(stopTimeout) {
		t.Fatalf("gateway still running %v after %v", stopTimeout, sig)
	}
	var ee *exec.ExitError
	switch {
	case sig == syscall.SIGKILL:
	case errors.As(p.err, &ee) && ee.ExitCode() == 128+int(sig):
		// The command died of the forwarded signal; its status is ours.
	default:
		b, _ := os.ReadFile(logPath)
		t.Errorf("gateway exit after %v: %v, want status %d\nlog:\n%s", sig, p.err, 128+int(sig), b)
	}
	if !poll(5*time.Second, func() bool { return !processAlive(ready.PID) }) {
		t.Errorf("the sandboxed command (pid %d) survived %v to the gateway", ready.PID, sig)
	}
	if sig == syscall.SIGKILL {
		// A killed gateway cannot remove its CA bundle; the next run does.
		h.exec(t, "true")
	}
	h.checkClean(t, ready.Inode)
}

// checkClean: no process left in the sandbox namespace, and the gateway
// namespace exactly as before (links, nftables, named namespaces, bundles).
func (h *sandboxHarness) checkClean(t *testing.T, inode uint64) {
	t.Helper()
	if inode == 0 {
		t.Error("no sandbox namespace inode in the log")
	}
	var procs []int
	if !poll(5*time.Second, func() bool { procs = procsInNetns(inode); return len(procs) == 0 }) {
		t.Errorf("processes still in the sandbox namespace %d: %v", inode, procs)
	}
	after := snapshotNS(t, h.ip, h.topo.gwNS, h.gwNS, h.tmp)
	if !after.equal(h.before) {
		t.Errorf("the gateway namespace changed:\nbefore %s\nafter  %s", h.before, after)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// runEnv is run with an environment (PATH added).
func runEnv(env []string, name string, args ...string) (string, error) {
	ctx, cancel := withTimeout(cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}
