package main

import (
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/admin"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/proxy"
)

// BenchmarkObserverDecision measures what the gateway does with the
// decision of every request: the metrics and the ring of recent decisions
// (allocs/op is the figure to watch: it runs once per request).
func BenchmarkObserverDecision(b *testing.B) {
	g := &gateway{metrics: metrics.New(), recent: admin.NewRing[recentDecision](recentDecisions)}
	observe := g.observer().Decision
	r := proxy.Record{Time: time.Now(), Client: "10.0.0.2:40000", Mode: "mitm", Host: "api.example.com", Port: 443,
		Method: "GET", Verdict: "allow", Entry: "api.example.com", Upstream: "192.0.2.10:443", Status: 200,
		Injected: []string{"Authorization"}, BytesIn: 120, BytesOut: 1024, DurationMS: 0.4}
	b.ReportAllocs()
	for b.Loop() {
		observe(r)
	}
	if got := len(g.recent.Last(1)); got != 1 {
		b.Fatalf("the ring holds %d decisions, want 1", got)
	}
}
