package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/config"
)

// limitedYAML is tenantYAML with limits on team-a.
func limitedYAML(limits string) string {
	text := fmt.Sprintf(tenantYAML, "true")
	return strings.Replace(text, "    clients: [127.0.0.2/32]\n", "    clients: [127.0.0.2/32]\n    limits: "+limits+"\n", 1)
}

func TestTenantRateLimit(t *testing.T) {
	e := newTenantGatewayText(t, limitedYAML("{requests_per_second: 0.001, burst: 2}"))
	a, b := basicHeader("team-a", passA), "Bearer "+bearerB
	for i := 0; i < 2; i++ {
		if got := e.viaProxy(t, false, a); got != 200 {
			t.Fatalf("team-a request %d: %d", i, got)
		}
	}
	if got := e.viaProxy(t, false, a); got != http.StatusTooManyRequests {
		t.Fatalf("team-a over its rate: %d, want 429", got)
	}
	if got := e.viaProxy(t, true, a); got != http.StatusTooManyRequests {
		t.Fatalf("team-a CONNECT over its rate: %d, want 429", got)
	}
	for i := 0; i < 4; i++ {
		if got := e.viaProxy(t, false, b); got != 200 {
			t.Fatalf("team-b (no limits) request %d: %d", i, got)
		}
	}
	lines := e.gw.logs.waitDecisions(t, 8)
	if lines[2]["code"] != string(CodeTenantRate) || lines[3]["code"] != string(CodeTenantRate) {
		t.Fatalf("rate-limited lines: %v / %v", lines[2], lines[3])
	}
}

func TestTenantVolumeLimit(t *testing.T) {
	e := newTenantGatewayText(t, limitedYAML("{bytes_per_minute: 10}"))
	minute := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	now := minute
	e.gw.srv.tenantUse.clock = func() time.Time { return now }
	a := basicHeader("team-a", passA)
	// The first request is let through and moves more than the cap (the
	// upstream's answer); the next is refused; team-b is not affected.
	if got := e.viaProxy(t, false, a); got != 200 {
		t.Fatalf("first: %d", got)
	}
	e.gw.logs.waitDecisions(t, 1)
	if got := e.viaProxy(t, false, a); got != http.StatusTooManyRequests {
		t.Fatalf("over the volume: %d, want 429", got)
	}
	if got := e.viaProxy(t, false, "Bearer "+bearerB); got != 200 {
		t.Fatalf("team-b: %d", got)
	}
	// A new minute, a new budget.
	now = minute.Add(time.Minute)
	if got := e.viaProxy(t, false, a); got != 200 {
		t.Fatalf("next minute: %d", got)
	}
	lines := e.gw.logs.waitDecisions(t, 4)
	if lines[1]["code"] != string(CodeTenantVolume) {
		t.Fatalf("volume line: %v", lines[1])
	}
}

func TestTenantConnectionLimit(t *testing.T) {
	e := newTenantGatewayText(t, limitedYAML("{max_connections: 1}"))
	a := basicHeader("team-a", passA)
	// One tunnel held open.
	c, err := net.DialTimeout("tcp", e.gw.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT api.example.com:%s HTTP/1.1\r\nHost: api.example.com\r\nProxy-Authorization: %s\r\n\r\n", e.tlsUp.port(), a)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first tunnel: %v %v", resp, err)
	}
	if got := e.viaProxy(t, false, a); got != http.StatusTooManyRequests {
		t.Fatalf("a second connection: %d, want 429", got)
	}
	if got := e.viaProxy(t, false, "Bearer "+bearerB); got != 200 {
		t.Fatalf("team-b: %d", got)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for e.viaProxy(t, false, a) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the closed tunnel's connection was never given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var codes []string
	for _, l := range e.gw.logs.decisions(t) {
		codes = append(codes, fmt.Sprint(l["code"]))
	}
	if !strings.Contains(strings.Join(codes, " "), string(CodeTenantConnections)) {
		t.Fatalf("no %s line: %v", CodeTenantConnections, codes)
	}
}

func TestTenantLimiterBucket(t *testing.T) {
	var tl tenantLimiter
	l := config.TenantLimits{RequestsPerSecond: 2, Burst: 2}
	now := time.Unix(1000, 0)
	for i := 0; i < 2; i++ {
		if den := tl.admit("a", l, false, now); den != nil {
			t.Fatalf("request %d refused: %v", i, den)
		}
	}
	if den := tl.admit("a", l, false, now); den == nil || den.code != CodeTenantRate {
		t.Fatalf("third at once: %v", den)
	}
	if den := tl.admit("a", l, false, now.Add(500*time.Millisecond)); den != nil {
		t.Fatalf("after half a second at 2/s: %v", den)
	}
}

// TestTenantVolumeCutsTunnel: an opaque tunnel that would take its tenant
// past its bytes per minute is cut, with no more than one relay write
// beyond the cap reaching the upstream.
func TestTenantVolumeCutsTunnel(t *testing.T) {
	const limit = 100_000
	var got atomic.Int64
	e := newTenantGatewayText(t, limitedYAML(fmt.Sprintf("{bytes_per_minute: %d}", limit)), func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
	})
	a := e.clientAs(t, url.UserPassword("team-a", passA), "")
	a.Transport.(*http.Transport).TLSClientConfig.RootCAs = e.gw.srv.roots
	body := strings.NewReader(strings.Repeat("x", 10*limit))
	resp, err := a.Post("https://a-only.example.com:"+e.tlsUp.port()+"/", "text/plain", body)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a 1 MB upload through a tunnel with a cap of %d bytes: status %d, want the tunnel cut", limit, resp.StatusCode)
	}
	if n := got.Load(); n > limit {
		t.Fatalf("the upstream got %d body bytes, beyond the cap of %d", n, limit)
	}
	lines := e.gw.logs.waitDecisions(t, 1)
	if lines[0]["code"] != string(CodeTenantVolume) || lines[0]["tenant"] != "team-a" {
		t.Fatalf("the tunnel's line: %v", lines[0])
	}
}
