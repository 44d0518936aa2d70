//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// measurement is one run of one scenario, direct or proxied.
type measurement struct {
	Requests   int64   `json:"requests"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	RPS        float64 `json:"rps,omitempty"`
	P50us      float64 `json:"p50_us,omitempty"`
	P99us      float64 `json:"p99_us,omitempty"`
	Bytes      int64   `json:"bytes,omitempty"`
	MiBps      float64 `json:"mib_per_s,omitempty"`
	// CPU used during the measured window, in cores (1.0 = one core busy).
	GatewayCPU float64 `json:"gateway_cpu"`
	BenchCPU   float64 `json:"bench_cpu"`
	// CPU the rest of the machine took on the gateway's and on the bench's
	// core during the window (from /proc/stat): anything well above a few
	// percent means the figures are contaminated by other work.
	OtherOnGatewayCPU float64 `json:"other_on_gateway_cpu"`
	OtherOnBenchCPU   float64 `json:"other_on_bench_cpu"`
	// Run-queue wait during the window as a fraction of it: time the
	// gateway's / the bench's threads were runnable but not running. Near 0
	// on a quiet machine; high values mean another process took the core.
	GatewayWait float64 `json:"gateway_runq_wait"`
	BenchWait   float64 `json:"bench_runq_wait"`
}

// pinnedCPUs are the gateway's and the bench's cores; -1 when not pinned.
var pinnedCPUs = [2]int{-1, -1}

// benchPeers are other processes whose CPU counts as the bench's: in the
// transparent scenario's client role, the bench process (the upstream).
var benchPeers []int

type cpuSnap struct {
	at             time.Time
	gw, self       time.Duration
	gwWait, slWait time.Duration
	busy           []time.Duration
}

// gwPIDByMark, as a gateway PID, stands for a gateway this process cannot
// see (a client inside the sandbox's PID namespace, whose /proc holds only
// the sandbox): each snapshot writes a "mark" line on stdout instead, at
// which the parent, which sees the gateway, reads its CPU time (see
// runTransparent).
const gwPIDByMark = -1

func snapCPU(gwPID int) cpuSnap {
	s := cpuSnap{at: time.Now(), self: cpuTime(os.Getpid()), slWait: runqWait(os.Getpid())}
	if gwPID == gwPIDByMark {
		fmt.Fprintln(os.Stdout, cpuMarkLine)
	}
	if gwPID > 0 {
		s.gw, s.gwWait = cpuTime(gwPID), runqWait(gwPID)
	}
	for _, p := range benchPeers { // the upstream, when the client is a child process
		s.self += cpuTime(p)
		s.slWait += runqWait(p)
	}
	if pinnedCPUs[0] >= 0 {
		s.busy = cpuBusy(pinnedCPUs[0], pinnedCPUs[1])
	}
	return s
}

// fill sets m's CPU fields from two snapshots a (start) and b (end).
func (a cpuSnap) fill(b cpuSnap, m *measurement) {
	w := b.at.Sub(a.at).Seconds()
	if w <= 0 {
		return
	}
	m.GatewayCPU = (b.gw - a.gw).Seconds() / w
	m.BenchCPU = (b.self - a.self).Seconds() / w
	m.GatewayWait = (b.gwWait - a.gwWait).Seconds() / w
	m.BenchWait = (b.slWait - a.slWait).Seconds() / w
	if len(a.busy) == 2 && len(b.busy) == 2 {
		m.OtherOnGatewayCPU = max(0, (b.busy[0]-a.busy[0]).Seconds()/w-m.GatewayCPU)
		m.OtherOnBenchCPU = max(0, (b.busy[1]-a.busy[1]).Seconds()/w-m.BenchCPU)
	}
}

// session is one client's state: a keep-alive connection, or nothing for a
// connection-per-request client. do performs one request.
type session interface {
	do() error
	close()
}

type loadConfig struct {
	clients    int
	warmup     time.Duration
	duration   time.Duration
	maxReqs    int64 // bound on requests per run, warm-up included
	maxSamples int   // latency samples kept per client
	gwPID      int   // 0 when measuring direct (gateway CPU is still read if set)
}

type openFunc func(ctx context.Context, deadline time.Time) (session, error)

// runLoad drives cfg.clients clients, each doing sequential requests, for
// warmup+duration. Only requests that complete inside the measured window
// count. Every loop is bounded by time and by maxReqs.
func runLoad(cfg loadConfig, open openFunc) measurement {
	start := time.Now()
	measStart := start.Add(cfg.warmup)
	end := measStart.Add(cfg.duration)
	hardEnd := end.Add(5 * time.Second) // no I/O outlives this
	ctx, cancel := context.WithDeadline(context.Background(), hardEnd)
	defer cancel()

	var (
		total, errs atomic.Int64
		firstErr    atomic.Value
		wg          sync.WaitGroup
		counts      = make([]int64, cfg.clients)
		lats        = make([][]time.Duration, cfg.clients)
	)
	var snap0, snap1 cpuSnap
	wg.Add(1)
	go func() { // CPU snapshots at the window's edges
		defer wg.Done()
		time.Sleep(time.Until(measStart))
		snap0 = snapCPU(cfg.gwPID)
		time.Sleep(time.Until(end))
		snap1 = snapCPU(cfg.gwPID)
	}()
	for i := 0; i < cfg.clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			lat := make([]time.Duration, 0, min(cfg.maxSamples, 1<<16))
			var s session
			defer func() {
				if s != nil {
					s.close()
				}
			}()
			for time.Now().Before(end) && total.Load() < cfg.maxReqs {
				if s == nil {
					var err error
					if s, err = open(ctx, hardEnd); err != nil {
						s = nil
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				t0 := time.Now()
				err := s.do()
				t1 := time.Now()
				total.Add(1)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					s.close()
					s = nil
					continue
				}
				if !t1.Before(measStart) && !t1.After(end) {
					counts[i]++
					if len(lat) < cfg.maxSamples {
						lat = append(lat, t1.Sub(t0))
					}
				}
			}
			lats[i] = lat
		}(i)
	}
	wg.Wait()

	m := measurement{Errors: errs.Load(), Seconds: cfg.duration.Seconds()}
	if v, ok := firstErr.Load().(string); ok {
		m.FirstError = v
	}
	var all []time.Duration
	for i := range counts {
		m.Requests += counts[i]
		all = append(all, lats[i]...)
	}
	m.RPS = float64(m.Requests) / cfg.duration.Seconds()
	m.P50us, m.P99us = percentileUS(all, 0.50), percentileUS(all, 0.99)
	snap0.fill(snap1, &m)
	return m
}

func percentileUS(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q * float64(len(d)-1))
	return float64(d[i].Nanoseconds()) / 1e3
}

// keepAlive is a session over one connection.
type keepAlive struct{ k *conn }

func (s keepAlive) do() error { _, err := s.k.roundTrip(); return err }
func (s keepAlive) close()    { s.k.close() }

// oneShot opens a new connection per request.
type oneShot struct {
	ctx      context.Context
	deadline time.Time
	open     func(ctx context.Context) (*conn, error)
}

func (s oneShot) do() error {
	k, err := s.open(s.ctx)
	if err != nil {
		return err
	}
	k.c.SetDeadline(s.deadline)
	_, err = k.roundTrip()
	k.close()
	return err
}
func (oneShot) close() {}

// target describes where a scenario's clients go: gw is "" for direct.
type target struct {
	gw    string
	gwPID int
	u     *upstream
}

func (t target) proxied() bool { return t.gw != "" }

// forwardKeepAlive: plain HTTP, keep-alive, absolute-form through the proxy.
func forwardKeepAlive(t target, cfg loadConfig) measurement {
	host := t.u.httpAddr.String()
	req := getRequest(host, "/small", t.proxied())
	cfg.gwPID = t.gwPID
	return runLoad(cfg, func(ctx context.Context, deadline time.Time) (session, error) {
		c, err := dialHTTP(ctx, t.gw, host)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(deadline)
		return keepAlive{newConn(c, req)}, nil
	})
}

// tlsHost is t's TLS listener as a hostTarget (named.go), addressed by its
// IP literal.
func (t target) tlsHost() hostTarget {
	return hostTarget{gw: t.gw, addr: t.u.tlsAddr.String(), gwPID: t.gwPID, tls: t.u.clientTLS}
}

// connectKeepAlive: each client holds one TLS connection (through a CONNECT
// tunnel, or direct) and sends sequential requests on it.
func connectKeepAlive(t target, cfg loadConfig) measurement {
	return tlsKeepAliveLoad(t.tlsHost(), cfg)
}

// newTunnelPerRequest: TCP connect + CONNECT + full TLS handshake + one
// request + close, per request; direct is TCP + TLS + request + close.
func newTunnelPerRequest(t target, cfg loadConfig) measurement {
	return tlsNewConnLoad(t.tlsHost(), cfg)
}

// download: one TLS connection, a warm-up of up to 32 MiB, then one response
// of size bytes, read and discarded; throughput in MiB/s.
func download(t target, size int64, timeout time.Duration) measurement {
	return tlsDownload(t.tlsHost(), size, timeout)
}

// idleResult is the idle-tunnel memory figure.
type idleResult struct {
	Tunnels       int     `json:"tunnels"`
	Opened        int     `json:"opened"`
	Errors        int     `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	RSSBeforeKiB  int64   `json:"rss_before_kib"`
	RSSAfterKiB   int64   `json:"rss_after_kib"`
	PerTunnelKiB  float64 `json:"per_tunnel_kib"`
	OpenSeconds   float64 `json:"open_seconds"`
	GatewayPID    int     `json:"-"`
	SettleSeconds float64 `json:"settle_seconds"`
}

// idleTunnels opens n CONNECT tunnels through g (TLS handshake done), leaves
// them idle for settle, and reports the growth of the gateway's VmRSS.
func idleTunnels(g *gateway, u *upstream, n, clients int, settle, timeout time.Duration) idleResult {
	r := idleResult{Tunnels: n, GatewayPID: g.pid, SettleSeconds: settle.Seconds()}
	host := u.tlsAddr.String()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Warm the gateway's code paths so "before" includes them.
	for i := 0; i < 8; i++ {
		if tc, err := dialTLS(ctx, g.addr, host, u.clientTLS); err == nil {
			tc.Close()
		}
	}
	time.Sleep(500 * time.Millisecond)
	before, err := rssKiB(g.pid)
	if err != nil {
		r.FirstError = err.Error()
		return r
	}
	r.RSSBeforeKiB = before

	conns := make([]*conn, n)
	var next atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				tc, err := dialTLS(ctx, g.addr, host, u.clientTLS)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				conns[i] = &conn{c: tc}
			}
		}()
	}
	wg.Wait()
	r.OpenSeconds = time.Since(t0).Seconds()
	for _, c := range conns {
		if c != nil {
			r.Opened++
		}
	}
	r.Errors = int(errs.Load())
	if v, ok := firstErr.Load().(string); ok {
		r.FirstError = v
	}
	time.Sleep(settle)
	if after, err := rssKiB(g.pid); err == nil {
		r.RSSAfterKiB = after
		if r.Opened > 0 {
			r.PerTunnelKiB = float64(after-before) / float64(r.Opened)
		}
	}
	for _, c := range conns {
		if c != nil {
			c.close()
		}
	}
	return r
}
