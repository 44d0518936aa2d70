package e2e

import (
	"strconv"
	"strings"
	"testing"
)

// TestSandboxRawSSH: in a sandbox with no proxy settings, a connection to
// port 22 of an address the gateway's DNS answered for a name whose entry
// lists 22 in raw_ports is relayed raw to that address (an SSH exchange
// goes both ways); the same address without the answer is refused.
func TestSandboxRawSSH(t *testing.T) {
	h := newSandboxHarness(t)
	base := readFile(t, h.cfg)
	h.cfg = writeVariant(t, h.dir, "raw.yaml", base,
		"    - domain: allowed.test\n", "    - domain: allowed.test\n      raw_ports: [22]\n")

	t.Run("ssh to a name the sandbox resolved", func(t *testing.T) {
		recs := len(h.records(t))
		res := h.exec(t, h.self, "ssh", "allowed.test", "22")
		want := strconv.Quote(sshBanner + "ok:SSH-2.0-sandbox\r\n")
		if !strings.Contains(res.stdout, "got "+want) {
			t.Errorf("ssh allowed.test:22 from the sandbox: %q (stderr %q)", res.stdout, res.stderr)
		}
		if acc := kinds(h.records(t)[recs:], "accept"); len(acc) != 1 || acc[0].Port != 22 {
			t.Errorf("upstream accepted %v, want one connection on port 22", acc)
		}
		decs := decisionLines(t, res.log)
		if len(decs) != 1 || decs[0].Mode != "raw" || decs[0].Host != "allowed.test" || decs[0].Verdict != "allow" ||
			decs[0].Upstream != upstreamIP.String()+":22" || !strings.Contains(decs[0].raw, `"transparent":true`) {
			t.Errorf("decision lines:\n%swant one raw allow of allowed.test", rawLines(decs))
		}
	})

	t.Run("the same address without a DNS answer is refused", func(t *testing.T) {
		recs := len(h.records(t))
		res := h.exec(t, h.self, "tcp", upstreamIP.String()+":22", `SSH-2.0-sandbox\r\n`)
		if strings.Contains(res.stdout, "SSH-2.0-OpenSSH") {
			t.Errorf("the sandbox reached the SSH server without a DNS answer: %q", res.stdout)
		}
		if acc := kinds(h.records(t)[recs:], "accept"); len(acc) != 0 {
			t.Errorf("upstream accepted %v", acc)
		}
		decs := decisionLines(t, res.log)
		if len(decs) != 1 || decs[0].Mode == "raw" || decs[0].Verdict == "allow" {
			t.Errorf("decision lines:\n%swant one refusal", rawLines(decs))
		}
	})
}
