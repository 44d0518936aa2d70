// Package metrics holds the gateway's Prometheus metrics: the counters and
// gauges the proxy, the DNS server and the config loader record into, and
// the HTTP handler that exposes them at /metrics. (Hooks run in their own
// process, `gateway hooks run`, and log one line per handler instead.)
//
// There are no globals: a *Metrics owns its own prometheus.Registry, so two
// gateways in one process (as in tests) never share counts. Every method is
// safe on a nil *Metrics and then does nothing, so a package can take an
// optional *Metrics and call it unconditionally.
//
// Label cardinality is bounded by design: mode, verdict, code, direction
// and result come from small fixed sets defined by the callers, and
// entry is an allowlist pattern from the config (e.g. "*.github.com"), never
// a host a client asked for. Series of entries removed by a reload stay
// until the process restarts (counters must not go backwards), which is
// bounded by the number of distinct entries ever configured.
//
// The recording methods are meant for the hot path: they look up the series
// with GetMetricWithLabelValues (no label map is built) and never panic. A
// label value that is not valid UTF-8 (impossible for values from a YAML
// config or from constants) is dropped rather than recorded or panicked on.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every metric name.
const namespace = "hookgate"

// Label values used by the methods that fix them. Callers define their own
// values for mode, verdict, code and DNS verdict.
const (
	DirectionIn  = "in"  // bytes from the client
	DirectionOut = "out" // bytes to the client

	resultOK    = "ok"
	resultError = "error"
)

// Metrics records the gateway's metrics into its own registry. Create it
// with New; the zero value is not usable, but a nil *Metrics is (it records
// nothing).
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	requests       *prometheus.CounterVec // mode, verdict, code, entry
	injections     *prometheus.CounterVec // entry
	upstreamErrors *prometheus.CounterVec // code
	activeTunnels  prometheus.Gauge
	bytes          *prometheus.CounterVec // direction
	bytesIn        prometheus.Counter     // bytes{direction="in"}, resolved once
	bytesOut       prometheus.Counter     // bytes{direction="out"}, resolved once
	dns            *prometheus.CounterVec // verdict
	reloadOK       prometheus.Counter     // reloads{result="ok"}
	reloadError    prometheus.Counter     // reloads{result="error"}
	generation     prometheus.Gauge
	limited        *prometheus.CounterVec // code
	activeConns    prometheus.Gauge
	reportMode     prometheus.Gauge
	tenants        *prometheus.CounterVec // tenant, verdict, code
}

// New returns a Metrics whose metrics, plus the Go runtime and process
// collectors, are registered on a fresh registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := factory{reg: reg}
	m := &Metrics{
		reg: reg,
		requests: f.counterVec("requests_total",
			"Requests and tunnels by mode (http, tunnel, mitm), verdict (allow; deny: refused by the policy; error: the upstream or the client failed), code (empty when allowed) and matched allowlist entry.",
			"mode", "verdict", "code", "entry"),
		injections: f.counterVec("injections_total",
			"Requests into which configured headers were injected, by allowlist entry.",
			"entry"),
		upstreamErrors: f.counterVec("upstream_errors_total",
			"Failures reaching or talking to an upstream, mid-body and mid-tunnel ones included, by code (upstream-error, upstream-timeout, upstream-tls-error).",
			"code"),
		activeTunnels: f.gauge("active_tunnels",
			"CONNECT and transparent tunnels currently open (opaque and intercepted)."),
		bytes: f.counterVec("bytes_total",
			"Bytes relayed, by direction: in = from the client, out = to the client.",
			"direction"),
		dns: f.counterVec("dns_decisions_total",
			"Decisions of the sandbox DNS server, by verdict.",
			"verdict"),
		generation: f.gauge("config_generation",
			"Generation of the config in effect; starts at 1 and grows by one with each successful reload."),
		limited: f.counterVec("limited_total",
			"Connections or requests refused by a limit, by code (too-many-connections, too-many-connections-per-client, ...).",
			"code"),
		tenants: f.counterVec("tenant_requests_total",
			"Requests and tunnels of each tenant (a shared gateway's sandboxes, named in the config), by verdict and code; clients of no tenant are not counted here.",
			"tenant", "verdict", "code"),
		activeConns: f.gauge("active_connections",
			"Client connections currently open on the gateway's proxy listeners (explicit and transparent), from accept to close."),
		reportMode: f.gauge("report_mode",
			"1 while network.mode is report (hosts the allowlist denies are let through and logged as would-deny), else 0."),
	}
	reloads := f.counterVec("reloads_total",
		"Config reloads (SIGHUP or POST /v1/reload), by result (ok, error).",
		"result")
	// Resolve the fixed-label series once: they then cost one atomic add,
	// and they appear in /metrics at 0 before the first event, so rate()
	// and alerts on them work from the start.
	m.reloadOK = reloads.WithLabelValues(resultOK)
	m.reloadError = reloads.WithLabelValues(resultError)
	m.bytesIn = m.bytes.WithLabelValues(DirectionIn)
	m.bytesOut = m.bytes.WithLabelValues(DirectionOut)

	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Built once: HandlerOpts.Registry registers the handler's own error
	// counter, which may happen only once per registry.
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	})
	return m
}

// factory creates metrics in namespace and registers them on reg.
type factory struct{ reg *prometheus.Registry }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

// Handler returns the HTTP handler serving the registry in the Prometheus
// exposition formats (text, or protobuf/OpenMetrics when the scraper asks).
// A collector that fails is reported in the output and counted in
// promhttp_metric_handler_errors_total; the rest is still served. For a nil
// *Metrics it answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return m.handler
}

// Request counts one request or tunnel: mode (http, tunnel, mitm),
// verdict (allow, deny, error), code (the X-Proxy-Error code;
// "" when allowed) and entry (the allowlist pattern that matched; "" when
// none did).
func (m *Metrics) Request(mode, verdict, code, entry string) {
	if m == nil {
		return
	}
	if c, err := m.requests.GetMetricWithLabelValues(mode, verdict, code, entry); err == nil {
		c.Inc()
	}
}

// Injection counts one request into which the headers of entry were
// injected.
func (m *Metrics) Injection(entry string) {
	if m == nil {
		return
	}
	if c, err := m.injections.GetMetricWithLabelValues(entry); err == nil {
		c.Inc()
	}
}

// UpstreamError counts one failure reaching or talking to an upstream, by
// its X-Proxy-Error code.
func (m *Metrics) UpstreamError(code string) {
	if m == nil {
		return
	}
	if c, err := m.upstreamErrors.GetMetricWithLabelValues(code); err == nil {
		c.Inc()
	}
}

// TunnelOpened records a tunnel being opened; pair it with TunnelClosed.
func (m *Metrics) TunnelOpened() {
	if m == nil {
		return
	}
	m.activeTunnels.Inc()
}

// TunnelClosed records a tunnel being closed.
func (m *Metrics) TunnelClosed() {
	if m == nil {
		return
	}
	m.activeTunnels.Dec()
}

// Bytes counts n bytes relayed in direction DirectionIn (from the client)
// or DirectionOut (to the client). n <= 0 and other directions are ignored.
func (m *Metrics) Bytes(direction string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	switch direction {
	case DirectionIn:
		m.bytesIn.Add(float64(n))
	case DirectionOut:
		m.bytesOut.Add(float64(n))
	}
}

// DNS counts one decision of the sandbox DNS server.
func (m *Metrics) DNS(verdict string) {
	if m == nil {
		return
	}
	if c, err := m.dns.GetMetricWithLabelValues(verdict); err == nil {
		c.Inc()
	}
}

// Reload counts one reload attempt, successful or not.
func (m *Metrics) Reload(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloadOK.Inc()
	} else {
		m.reloadError.Inc()
	}
}

// SetReportMode records whether the config in effect is in report mode.
func (m *Metrics) SetReportMode(on bool) {
	if m == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.reportMode.Set(v)
}

// SetGeneration records the generation of the config now in effect.
func (m *Metrics) SetGeneration(g uint64) {
	if m == nil {
		return
	}
	m.generation.Set(float64(g))
}

// Limited counts one connection or request refused by a limit, by its
// X-Proxy-Error code.
func (m *Metrics) Limited(code string) {
	if m == nil {
		return
	}
	if c, err := m.limited.GetMetricWithLabelValues(code); err == nil {
		c.Inc()
	}
}

// ActiveConnections adds delta (+1 on accept, -1 on close) to the number of
// open client connections.
func (m *Metrics) ActiveConnections(delta int) {
	if m == nil || delta == 0 {
		return
	}
	m.activeConns.Add(float64(delta))
}
