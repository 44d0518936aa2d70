package main

import (
	"strings"
	"testing"
)

// reportConfig is e's config with network.mode: report.
func reportConfig(e *opsEnv, allow ...string) string {
	return strings.Replace(e.config(allow...), "network:\n", "network:\n  mode: report\n", 1)
}

// TestReportModeServe: a gateway in report mode warns at start, shows the
// mode in /metrics, lets a host off the allowlist through as would-deny
// without injecting into it (inject.example.com is listed with a transform
// only in the enforcing config), and a reload back to enforce refuses it.
func TestReportModeServe(t *testing.T) {
	e := newOpsEnv(t)
	sg := serveInProcess(t, reportConfig(e, "example.com"), e.args()...)
	if len(sg.logLines(t, "REPORT MODE")) != 1 {
		t.Fatalf("no REPORT MODE warning at start:\n%s", sg.logs.String())
	}
	sg.waitMetrics(t, "hookgate_report_mode 1")

	c := e.client(sg)
	defer c.CloseIdleConnections()
	code, body := get(t, c, e.url("inject.example.com", "/"))
	if code != 200 || strings.Contains(body, "Bearer") {
		t.Fatalf("a would-deny host: %d %q, want 200 with no Authorization", code, hideToken(body, e.token))
	}
	c.CloseIdleConnections() // the tunnel's line is written when it closes
	sg.waitMetrics(t, `hookgate_requests_total{code="blocked-by-allowlist",entry="",mode="tunnel",verdict="would-deny"} 1`)
	lines := sg.logLines(t, "decision")
	if len(lines) != 1 || lines[0]["verdict"] != "would-deny" || lines[0]["generation"] != float64(1) {
		t.Fatalf("decision lines = %v", lines)
	}

	sg.rewrite(t, e.config("example.com"))
	if code, body := sg.admin(t, "POST", "/v1/reload"); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	sg.waitMetrics(t, "hookgate_report_mode 0")
	fresh := e.client(sg)
	defer fresh.CloseIdleConnections()
	if code, _ := get(t, fresh, e.url("inject.example.com", "/")); code != 0 {
		t.Fatalf("enforce mode after reload: %d, want the CONNECT refused", code)
	}
	if strings.Contains(sg.logs.String(), e.token) {
		t.Fatal("the token appears in the gateway's log")
	}
}

// hideToken masks the test's token in text shown on failure.
func hideToken(text, token string) string { return strings.ReplaceAll(text, token, "[token]") }
