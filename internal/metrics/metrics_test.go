package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// value returns the value of the series of family name whose labels are
// exactly want, and whether it exists.
func value(t *testing.T, m *Metrics, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			if len(s.GetLabel()) != len(want) {
				continue
			}
			for _, l := range s.GetLabel() {
				if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			switch {
			case s.Counter != nil:
				return s.Counter.GetValue(), true
			case s.Gauge != nil:
				return s.Gauge.GetValue(), true
			}
		}
	}
	return 0, false
}

func mustValue(t *testing.T, m *Metrics, name string, labels map[string]string, want float64) {
	t.Helper()
	got, ok := value(t, m, name, labels)
	if !ok {
		t.Fatalf("%s%v: no such series", name, labels)
	}
	if got != want {
		t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func TestCountersMove(t *testing.T) {
	m := New()

	m.Request("tunnel", "allow", "", "*.github.com")
	m.Request("tunnel", "allow", "", "*.github.com")
	m.Request("http", "deny", "blocked-by-allowlist", "")
	m.Request("mitm", "allow", "", "telemetry.example.com")
	m.Injection("telemetry.example.com")
	m.UpstreamError("upstream-timeout")
	m.TunnelOpened()
	m.TunnelOpened()
	m.TunnelClosed()
	m.Bytes(DirectionIn, 100)
	m.Bytes(DirectionOut, 5000)
	m.Bytes(DirectionOut, -3) // ignored, must not panic
	m.Bytes("sideways", 7)    // ignored
	m.DNS("allow")
	m.DNS("deny")
	m.DNS("deny")
	m.Reload(true)
	m.Reload(false)
	m.Reload(false)
	m.SetGeneration(7)
	m.Limited("too-many-connections-per-client")
	m.ActiveConnections(+1)
	m.ActiveConnections(+1)
	m.ActiveConnections(-1)
	m.Request("http", "deny", "bad-request", "\xff") // invalid UTF-8: dropped, no panic

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"hookgate_requests_total", map[string]string{"mode": "tunnel", "verdict": "allow", "code": "", "entry": "*.github.com"}, 2},
		{"hookgate_requests_total", map[string]string{"mode": "http", "verdict": "deny", "code": "blocked-by-allowlist", "entry": ""}, 1},
		{"hookgate_requests_total", map[string]string{"mode": "mitm", "verdict": "allow", "code": "", "entry": "telemetry.example.com"}, 1},
		{"hookgate_injections_total", map[string]string{"entry": "telemetry.example.com"}, 1},
		{"hookgate_upstream_errors_total", map[string]string{"code": "upstream-timeout"}, 1},
		{"hookgate_active_tunnels", nil, 1},
		{"hookgate_bytes_total", map[string]string{"direction": "in"}, 100},
		{"hookgate_bytes_total", map[string]string{"direction": "out"}, 5000},
		{"hookgate_dns_decisions_total", map[string]string{"verdict": "allow"}, 1},
		{"hookgate_dns_decisions_total", map[string]string{"verdict": "deny"}, 2},
		{"hookgate_reloads_total", map[string]string{"result": "ok"}, 1},
		{"hookgate_reloads_total", map[string]string{"result": "error"}, 2},
		{"hookgate_config_generation", nil, 7},
		{"hookgate_limited_total", map[string]string{"code": "too-many-connections-per-client"}, 1},
		{"hookgate_active_connections", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { mustValue(t, m, tt.name, tt.labels, tt.want) })
	}

	// The four requests_total series, and no more (the invalid one was dropped).
	if n, err := testutil.GatherAndCount(m.reg, "hookgate_requests_total"); err != nil || n != 3 {
		t.Errorf("hookgate_requests_total has %d series (err %v), want 3", n, err)
	}
	if _, ok := value(t, m, "hookgate_bytes_total", map[string]string{"direction": "sideways"}); ok {
		t.Error(`bytes_total{direction="sideways"} exists; unknown directions must be ignored`)
	}
}

func TestFixedSeriesStartAtZero(t *testing.T) {
	m := New()
	mustValue(t, m, "hookgate_reloads_total", map[string]string{"result": "ok"}, 0)
	mustValue(t, m, "hookgate_reloads_total", map[string]string{"result": "error"}, 0)
	mustValue(t, m, "hookgate_bytes_total", map[string]string{"direction": "in"}, 0)
	mustValue(t, m, "hookgate_bytes_total", map[string]string{"direction": "out"}, 0)
	mustValue(t, m, "hookgate_active_tunnels", nil, 0)
}

func TestInstancesAreIndependent(t *testing.T) {
	a, b := New(), New()
	a.Injection("x.example")
	if _, ok := value(t, b, "hookgate_injections_total", map[string]string{"entry": "x.example"}); ok {
		t.Fatal("a count on one Metrics shows up in another: shared global state")
	}
}

func TestLint(t *testing.T) {
	m := New()
	m.Request("http", "allow", "", "a.example")
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, namespace+"_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestHandler(t *testing.T) {
	m := New()
	m.Request("tunnel", "allow", "", "*.github.com")
	m.Injection("telemetry.example.com")
	m.UpstreamError("upstream-error")
	m.DNS("allow")
	m.Limited("too-many-connections")
	m.SetGeneration(3)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "text/plain") // the text format, not protobuf
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, body)
	}
	for _, name := range []string{
		"hookgate_requests_total",
		"hookgate_injections_total",
		"hookgate_upstream_errors_total",
		"hookgate_active_tunnels",
		"hookgate_bytes_total",
		"hookgate_dns_decisions_total",
		"hookgate_reloads_total",
		"hookgate_config_generation",
		"hookgate_limited_total",
		"hookgate_active_connections",
		"go_goroutines",
		"process_cpu_seconds_total", // Linux; the CI platform
		"promhttp_metric_handler_errors_total",
	} {
		if _, ok := families[name]; !ok {
			t.Errorf("family %s missing from /metrics", name)
		}
	}
	if !strings.Contains(string(body), `hookgate_requests_total{code="",entry="*.github.com",mode="tunnel",verdict="allow"} 1`) {
		t.Errorf("requests_total line missing:\n%s", body)
	}
}

func TestNilIsSafe(t *testing.T) {
	var m *Metrics
	m.Request("http", "allow", "", "x")
	m.Injection("x")
	m.UpstreamError("upstream-error")
	m.TunnelOpened()
	m.TunnelClosed()
	m.Bytes(DirectionIn, 1)
	m.DNS("allow")
	m.Reload(true)
	m.SetGeneration(1)
	m.Limited("too-many-connections")
	m.ActiveConnections(1)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Metrics handler: status %d, want 404", rec.Code)
	}
}

func TestRequestAllocs(t *testing.T) {
	m := New()
	m.Request("tunnel", "allow", "", "*.github.com") // create the series
	if a := testing.AllocsPerRun(1000, func() { m.Request("tunnel", "allow", "", "*.github.com") }); a > 0 {
		t.Errorf("Request on an existing series allocates %v times per call, want 0", a)
	}
}

// BenchmarkRequest measures the hot-path cost of counting a request on an
// existing series, serially and from all Ps.
func BenchmarkRequest(b *testing.B) {
	m := New()
	entries := []string{"*.github.com", "api.example.com", "telemetry.example.com", "*"}
	for _, e := range entries {
		m.Request("tunnel", "allow", "", e)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			m.Request("tunnel", "allow", "", entries[i&3])
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				m.Request("tunnel", "allow", "", entries[i&3])
				i++
			}
		})
	})
}

// TestEveryMetricIsDocumented: the README's metrics table lists exactly the
// gateway's own metrics, so that none is exposed unexplained and none is
// documented that nothing records.
func TestEveryMetricIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(hookgate_[a-z_]+)`").FindAllStringSubmatch(string(readme), -1) {
		documented = append(documented, m[1])
	}
	descs := make(chan *prometheus.Desc, 64)
	go func() {
		New().reg.Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var registered []string
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], namespace+"_") {
			registered = append(registered, m[1])
		}
	}
	slices.Sort(documented)
	slices.Sort(registered)
	if !slices.Equal(documented, registered) {
		t.Errorf("README documents %v\nthe registry has %v", documented, registered)
	}
}
