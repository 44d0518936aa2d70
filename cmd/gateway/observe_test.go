package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/internal/testlog"
)

// logLines returns the gateway's JSON log lines whose message starts with
// prefix.
func (sg *servedGateway) logLines(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(sg.logs.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && strings.HasPrefix(fmt.Sprint(m["message"]), prefix) {
			out = append(out, m)
		}
	}
	return out
}

// waitMetrics polls /metrics until it has every line of want, and fails
// with what it has after a bounded wait.
func (sg *servedGateway) waitMetrics(t *testing.T, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, body := sg.admin(t, "GET", "/metrics")
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing = w
				break
			}
		}
		if missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", missing, grepLines(body, "hookgate_"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func grepLines(text, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestActiveConnectionsMetric: hookgate_active_connections counts the
// client connections open on the proxy listener, up and back down.
func TestActiveConnectionsMetric(t *testing.T) {
	e := newOpsEnv(t)
	sg := serveInProcess(t, e.config("example.com"), e.args()...)
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.DialTimeout("tcp", sg.proxyAddr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	sg.waitMetrics(t, "hookgate_active_connections 2")
	for _, c := range conns {
		c.Close()
	}
	sg.waitMetrics(t, "hookgate_active_connections 0")
}

// TestReloadShowsSettingsInForce: a reload that changes settings read only
// at start leaves their old values in force and says so — in the reload
// answer, on the log line, and in /v1/config, which shows what is in force
// — while the rest of the new config applies.
func TestReloadShowsSettingsInForce(t *testing.T) {
	e := newOpsEnv(t)
	base := e.config("example.com")
	sg := serveInProcess(t, base+"log: {level: info}\n", e.args()...)

	changed := strings.Replace(e.config("other.example.com"), "limits: {shutdown_grace: 3s}",
		"limits: {shutdown_grace: 3s, max_connections: 7}", 1) + "log: {level: debug}\n"
	sg.rewrite(t, changed)
	code, body := sg.admin(t, "POST", "/v1/reload")
	if code != 200 || body != `{"generation":2,"pending_restart":["limits.max_connections","log.level"]}`+"\n" {
		t.Fatalf("reload: %d %s", code, body)
	}
	lines := sg.logLines(t, "config reloaded") // the exact message, which tools count
	if len(lines) != 1 || lines[0]["message"] != "config reloaded" || lines[0]["level"] != "warn" || fmt.Sprint(lines[0]["pending_restart"]) != "[limits.max_connections log.level]" {
		t.Fatalf("reload log lines: %v", lines)
	}

	_, raw := sg.admin(t, "GET", "/v1/config")
	var view struct {
		Generation     uint64   `json:"generation"`
		PendingRestart []string `json:"pending_restart"`
		Allowlist      []struct{ Domain string }
		Limits         struct {
			MaxConnections int `json:"max_connections"`
		}
		Log map[string]string
	}
	if err := json.Unmarshal([]byte(raw), &view); err != nil {
		t.Fatalf("/v1/config: %v\n%s", err, raw)
	}
	if view.Generation != 2 || len(view.Allowlist) != 1 || view.Allowlist[0].Domain != "other.example.com" {
		t.Errorf("/v1/config does not show the reloaded allowlist: %s", raw)
	}
	if view.Limits.MaxConnections == 7 || view.Log["level"] != "info" {
		t.Errorf("/v1/config shows restart-only settings that are not in force: %s", raw)
	}
	if fmt.Sprint(view.PendingRestart) != "[limits.max_connections log.level]" {
		t.Errorf("/v1/config pending_restart = %v", view.PendingRestart)
	}

	// Back to the values in force: nothing pending any more.
	sg.rewrite(t, base+"log: {level: info}\n")
	if code, body := sg.admin(t, "POST", "/v1/reload"); code != 200 || !strings.Contains(body, `"pending_restart":[]`) {
		t.Fatalf("reload back: %d %s", code, body)
	}
}

// TestAdminBeyondLoopbackWarns: an admin API that listens on every
// interface without a token is warned about at start and on reload; one on
// loopback is not.
func TestAdminBeyondLoopbackWarns(t *testing.T) {
	e := newOpsEnv(t)
	const warning = "the admin API listens beyond loopback without a token"
	local := serveInProcess(t, e.config("example.com"), e.args()...)
	if n := len(local.logLines(t, warning)); n != 0 {
		t.Errorf("a loopback admin API was warned about %d times", n)
	}

	open := serveInProcess(t, e.config("example.com"), append(e.args(), "--admin", "0.0.0.0:0")...)
	if n := len(open.logLines(t, warning)); n != 1 {
		t.Fatalf("%d warnings at start, want 1:\n%s", n, open.logs.String())
	}
	_, port, _ := net.SplitHostPort(open.adminAddr)
	open.adminAddr = net.JoinHostPort("127.0.0.1", port)
	if code, body := open.admin(t, "POST", "/v1/reload"); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if n := len(open.logLines(t, warning)); n != 2 {
		t.Fatalf("%d warnings after a reload, want 2", n)
	}
}

// TestFailuresAreErrorsInLogAndMetrics: through the real gateway, an
// upstream that cannot be reached and a header over the limit are logged
// and counted with verdict error (not deny), every line has a timestamp
// with milliseconds, and every duration is in milliseconds.
func TestFailuresAreErrorsInLogAndMetrics(t *testing.T) {
	e := newOpsEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closed, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	sg := serveInProcess(t, e.config("example.com"), append(e.args(), "--test-allow-upstream", "127.0.0.1:"+closed)...)

	c := e.client(sg)
	defer c.CloseIdleConnections()
	if code, _ := get(t, c, "http://example.com:"+closed+"/"); code != 502 {
		t.Fatalf("unreachable upstream: %d, want 502", code)
	}
	raw, err := net.DialTimeout("tcp", sg.proxyAddr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(raw, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", 100<<10))
	status, _ := bufio.NewReader(raw).ReadString('\n')
	if !strings.HasPrefix(status, "HTTP/1.1 431 ") {
		t.Fatalf("oversized header: %q, want 431", status)
	}

	sg.waitMetrics(t,
		`hookgate_requests_total{code="upstream-error",entry="example.com",mode="http",verdict="error"} 1`,
		`hookgate_requests_total{code="client-header-too-large",entry="",mode="http",verdict="error"} 1`,
		`hookgate_upstream_errors_total{code="upstream-error"} 1`,
	)
	decisions := sg.logLines(t, "decision")
	if len(decisions) != 2 {
		t.Fatalf("%d decision lines, want 2:\n%s", len(decisions), sg.logs.String())
	}
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for _, l := range sg.logLines(t, "") {
		if !stamp.MatchString(fmt.Sprint(l["time"])) {
			t.Errorf("time %v is not RFC 3339 with milliseconds: %v", l["time"], l)
		}
		for k := range l {
			if strings.Contains(k, "duration") || k == "grace" {
				if !strings.HasSuffix(k, "_ms") {
					t.Errorf("duration field %q has no unit: %v", k, l)
				}
			}
		}
	}
}

// brokenListener accepts nothing: its Accept fails at once with an error
// that is not "closed", as a listener whose socket broke does.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errors.New("accept: the socket broke") }

// The admin server's Serve error is logged, not dropped.
func TestServeAdminLogsServeError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs testlog.Buffer
	srv := serveAdmin(http.NotFoundHandler(), brokenListener{ln}, zerolog.New(&logs))
	defer srv.Close()
	logs.Wait(t, 10*time.Second, func(s string) bool { return strings.Contains(s, "the admin API stopped serving") })
	lines := logs.Lines(t)
	if len(lines) != 1 || lines[0]["level"] != "error" || lines[0]["error"] != "accept: the socket broke" || lines[0]["admin"] != ln.Addr().String() {
		t.Errorf("log lines %v, want one error naming the listener and the cause", lines)
	}
}
