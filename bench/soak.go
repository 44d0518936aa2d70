//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// The soak: operations mixed allowed, injected
// and denied, driven at the per-client connection limit, once without and
// once with a config reload every second; errors beyond the intended
// denials, p50/p99 of both runs and their p99 ratio, and the gateway's
// memory, goroutines, descriptors and active tunnels before, after and
// after an idle settle. See bench/README.md ("soak").

// The names the soak uses. The DNS server in this process answers the first
// three with 127.0.0.1; the allowlist allows the plain and the inject host
// (the inject host with a transform), and denies everything else.
const (
	soakPlainHost  = "plain.bench.test"
	soakInjectHost = "inject.bench.test"
	soakDeniedHost = "denied.bench.test"
	soakToggleHost = "reload-toggle.bench.test" // added/removed by each reload
	soakTokenEnv   = "BENCH_TOKEN"              // set for the gateway process only
	soakFakeAuth   = "Bearer sandbox-placeholder"
)

type soakOptions struct {
	bin         string
	dir         string          // scratch directory (config, CA, log)
	cpu         int             // gateway core; -1: not pinned
	ops         int             // operations per run
	clients     int             // concurrent clients
	limit       int             // limits.max_connections_per_client (normally = clients)
	mix         [numOpKinds]int // weights of plain, inject, denied
	warmupOps   int
	reloadEvery time.Duration
	settle      time.Duration
	runTimeout  time.Duration // bound on one run
	opTimeout   time.Duration // bound on one operation (dial to graceful close)
	retries     int
	maxOther    float64
	progress    io.Writer
}

// soakRun is one run of opsPerRun operations.
type soakRun struct {
	Reloading   bool              `json:"reloading"`
	Ops         int64             `json:"ops"`         // attempted
	OK          int64             `json:"ok"`          // expected outcome (intended denials included)
	Plain       int64             `json:"plain_ok"`    // tunnel + TLS + 200
	Injected    int64             `json:"injected_ok"` // upstream saw exactly the gateway's bearer token
	Denied      int64             `json:"denied_ok"`   // 403 blocked-by-allowlist, as intended
	Errors      int64             `json:"errors"`      // everything else
	ErrorKinds  map[string]int64  `json:"error_kinds,omitempty"`
	FirstErrors map[string]string `json:"first_errors,omitempty"`
	Seconds     float64           `json:"seconds"`
	OpsPerSec   float64           `json:"ops_per_s"`
	P50us       float64           `json:"p50_us"`
	P99us       float64           `json:"p99_us"`
	P999us      float64           `json:"p999_us"`
	MaxUs       float64           `json:"max_us"`
	// Per kind: p50 and p99 in µs.
	KindP50us map[string]float64 `json:"kind_p50_us"`
	KindP99us map[string]float64 `json:"kind_p99_us"`
	// Reloads during the run (reloading runs only).
	Reloads       int     `json:"reloads,omitempty"`
	ReloadsFailed int     `json:"reloads_failed,omitempty"`
	ReloadFirstEr string  `json:"reload_first_error,omitempty"`
	ReloadMaxMs   float64 `json:"reload_max_ms,omitempty"`
	// Operations whose [start, end] overlapped a reload's [request, answer].
	OverlapOps   int     `json:"reload_overlap_ops,omitempty"`
	OverlapP99us float64 `json:"reload_overlap_p99_us,omitempty"`
	OverlapMaxUs float64 `json:"reload_overlap_max_us,omitempty"`
	// Cross-checks from this process's side.
	UpstreamTokenOK  int64 `json:"upstream_token_ok"`
	UpstreamTokenBad int64 `json:"upstream_token_bad"`
	DNSQueries       int64 `json:"dns_queries"`
	// Lookups of the denied name: a name the allowlist denies must never
	// be looked up (reported, expected 0).
	DeniedLookups int64 `json:"denied_name_lookups"`
}

// soakMem is the gateway's footprint at one moment.
type soakMem struct {
	RSSKiB        int64   `json:"rss_kib"`
	HeapInuseKiB  int64   `json:"heap_inuse_kib"` // go_memstats_heap_inuse_bytes
	Goroutines    int64   `json:"goroutines"`
	OpenFDs       int64   `json:"open_fds"`
	ActiveTunnels float64 `json:"active_tunnels"` // hookgate_active_tunnels
	ActiveConns   float64 `json:"active_connections"`
	Err           string  `json:"error,omitempty"`
}

type soakResult struct {
	Mix       string  `json:"mix"` // plain:inject:denied weights
	Clients   int     `json:"clients"`
	Limit     int     `json:"max_connections_per_client"`
	OpsPerRun int     `json:"ops_per_run"`
	Quiet     soakRun `json:"quiet"`
	Reload    soakRun `json:"reload"`
	Attempts  int     `json:"attempts"`
	// Errors over the warm-up and every attempt, the kept one included.
	AllErrors     int64             `json:"all_attempt_errors"`
	AllErrorKinds map[string]int64  `json:"all_attempt_error_kinds,omitempty"`
	AllFirstErrs  map[string]string `json:"all_attempt_first_errors,omitempty"`
	TotalOps      int64             `json:"total_ops"` // warm-up and every attempt
	P99Ratio      float64           `json:"p99_ratio"`
	// Memory: after the warm-up, after the first run, after the last run,
	// and after an idle settle.
	MemStart      soakMem `json:"mem_start"`
	MemAfterFirst soakMem `json:"mem_after_first_run"`
	MemEnd        soakMem `json:"mem_end"`
	MemSettled    soakMem `json:"mem_settled"`
	SettleSeconds float64 `json:"settle_seconds"`
	// (settled − start) RSS per 1,000 operations measured after the start
	// reading; and the same from the end of the first run (steady state).
	RSSPerKOpsKiB       float64 `json:"rss_kib_per_1000_ops"`
	SteadyRSSPerKOpsKiB float64 `json:"steady_rss_kib_per_1000_ops"`
	HeapPerKOpsKiB      float64 `json:"heap_kib_per_1000_ops"`
	MemoryFlat          bool    `json:"memory_flat"`
	// The gateway's own log (level info): warn/error lines other than the
	// TEST MODE notice, and the reloads it logged.
	LogBytes       int64    `json:"log_bytes"`
	LogProblems    int      `json:"log_warn_error_lines"`
	LogProblemMsgs []string `json:"log_warn_error_samples,omitempty"`
	LogReloads     int      `json:"log_config_reloaded_lines"`
	Seconds        float64  `json:"seconds"` // wall time of the whole scenario
	FatalError     string   `json:"fatal_error,omitempty"`
}

// Thresholds for "flat memory" (see bench/README.md).
const (
	soakFlatKiBPerKOps = 256 // steady-state RSS growth per 1,000 ops
	soakFlatSlack      = 4   // goroutines / descriptors above the start reading
)

type opKind int

const (
	opPlain opKind = iota
	opInject
	opDenied
	numOpKinds
)

var opNames = [numOpKinds]string{"plain", "inject", "denied"}

type soakEnv struct {
	o         soakOptions
	g         *gateway
	proxy     string
	admin     string
	up        *soakUpstream
	dns       *loopbackDNS
	cfgPath   string
	caDir     string
	plainTLS  *tls.Config
	injectTLS *tls.Config
	connect   [numOpKinds][]byte
	request   [numOpKinds][]byte
	toggle    bool
	httpc     *http.Client
}

// soak runs the whole scenario on a fresh gateway. quiet and reload are the
// kept pair's measurements, for the table.
func soak(o soakOptions) (res soakResult, quiet, reload measurement) {
	t0 := time.Now()
	res = soakResult{Mix: fmt.Sprintf("%d:%d:%d", o.mix[0], o.mix[1], o.mix[2]), Clients: o.clients, Limit: o.limit, OpsPerRun: o.ops, SettleSeconds: o.settle.Seconds()}
	defer func() { res.Seconds = time.Since(t0).Seconds() }()
	e, err := newSoakEnv(o)
	if e != nil {
		defer e.close()
	}
	if err != nil {
		res.FatalError = err.Error()
		return res, quiet, reload
	}
	fmt.Fprintf(o.progress, "  soak      gateway pid %d on CPU(s) %s, proxy %s, admin %s; %d clients, per-client limit %d; warm-up %d ops...",
		e.g.pid, e.g.cpus, e.proxy, e.admin, o.clients, o.limit, o.warmupOps)
	w, _ := e.run(o.warmupOps, false)
	res.TotalOps += w.Ops
	res.addErrors(w)
	fmt.Fprintf(o.progress, " %d errors\n", w.Errors)
	time.Sleep(time.Second)
	res.MemStart = e.mem()
	var memOps, steadyOps int64 // operations since MemStart, since MemAfterFirst

	for attempt := 1; ; attempt++ {
		fmt.Fprintf(o.progress, "  soak      %d ops without reloads...", o.ops)
		q, mq := e.run(o.ops, false)
		fmt.Fprintf(o.progress, " %.0f ops/s, p99 %s, %d errors; with a reload every %s...", q.OpsPerSec, us(q.P99us), q.Errors, o.reloadEvery)
		if attempt == 1 {
			res.MemAfterFirst = e.mem()
		} else {
			steadyOps += q.Ops
		}
		r, mr := e.run(o.ops, true)
		other := max(soakOther(mq), soakOther(mr))
		fmt.Fprintf(o.progress, " %.0f ops/s, p99 %s, %d errors, %d reloads (other load %.0f%%)\n",
			r.OpsPerSec, us(r.P99us), r.Errors, r.Reloads, 100*other)
		memOps += q.Ops + r.Ops
		steadyOps += r.Ops
		res.TotalOps += q.Ops + r.Ops
		res.addErrors(q)
		res.addErrors(r)
		if attempt == 1 || other < max(soakOther(quiet), soakOther(reload)) {
			res.Quiet, res.Reload, quiet, reload = q, r, mq, mr
			res.Attempts = attempt
		}
		if err := e.g.alive(); err != nil {
			res.FatalError = err.Error()
			return res, quiet, reload
		}
		if other <= o.maxOther || attempt > o.retries {
			break
		}
	}
	res.MemEnd = e.mem()
	fmt.Fprintf(o.progress, "  soak      idle settle %s...", o.settle)
	time.Sleep(o.settle)
	res.MemSettled = e.mem()
	fmt.Fprintf(o.progress, " RSS %d → %d → %d, settled %d KiB; active tunnels %.0f\n",
		res.MemStart.RSSKiB, res.MemAfterFirst.RSSKiB, res.MemEnd.RSSKiB, res.MemSettled.RSSKiB, res.MemSettled.ActiveTunnels)

	if res.Quiet.P99us > 0 {
		res.P99Ratio = res.Reload.P99us / res.Quiet.P99us
	}
	s, st, af := res.MemSettled, res.MemStart, res.MemAfterFirst
	if memOps > 0 {
		k := float64(memOps) / 1000
		res.RSSPerKOpsKiB = float64(s.RSSKiB-st.RSSKiB) / k
		res.HeapPerKOpsKiB = float64(s.HeapInuseKiB-st.HeapInuseKiB) / k
	}
	if steadyOps > 0 {
		res.SteadyRSSPerKOpsKiB = float64(s.RSSKiB-af.RSSKiB) / (float64(steadyOps) / 1000)
	}
	res.MemoryFlat = s.Err == "" && st.Err == "" && af.Err == "" &&
		res.SteadyRSSPerKOpsKiB <= soakFlatKiBPerKOps &&
		s.Goroutines <= st.Goroutines+soakFlatSlack && s.OpenFDs <= st.OpenFDs+soakFlatSlack &&
		s.ActiveTunnels == 0
	e.scanLog(&res)
	return res, quiet, reload
}

// addErrors adds a run's errors (warm-up and discarded attempts too) to the
// totals.
func (res *soakResult) addErrors(x soakRun) {
	res.AllErrors += x.Errors
	for k, n := range x.ErrorKinds {
		if res.AllErrorKinds == nil {
			res.AllErrorKinds, res.AllFirstErrs = map[string]int64{}, map[string]string{}
		}
		res.AllErrorKinds[k] += n
		if _, ok := res.AllFirstErrs[k]; !ok {
			res.AllFirstErrs[k] = x.FirstErrors[k]
		}
	}
}

// soakOther is the CPU other processes took on either pinned core.
func soakOther(m measurement) float64 { return max(m.OtherOnGatewayCPU, m.OtherOnBenchCPU) }

func soakPass(r soakResult) bool {
	return r.FatalError == "" && r.AllErrors == 0 && r.Quiet.Errors == 0 && r.Reload.Errors == 0 &&
		r.Reload.Reloads > 0 && r.Reload.ReloadsFailed == 0 &&
		r.P99Ratio > 0 && r.P99Ratio <= 2 && r.MemoryFlat
}

func newSoakEnv(o soakOptions) (*soakEnv, error) {
	e := &soakEnv{o: o, httpc: &http.Client{Timeout: 5 * time.Second}}
	var err error
	if e.up, err = startSoakUpstream(filepath.Join(o.dir, "soak-upstream.pem")); err != nil {
		return e, fmt.Errorf("soak upstream: %w", err)
	}
	if e.dns, err = startSoakDNS(soakPlainHost, soakInjectHost, soakDeniedHost, soakToggleHost); err != nil {
		return e, fmt.Errorf("soak DNS: %w", err)
	}
	e.caDir = filepath.Join(o.dir, "soak-ca")
	if out, err := exec.Command(o.bin, "ca", "init", "--dir", e.caDir).CombinedOutput(); err != nil {
		return e, fmt.Errorf("gateway ca init: %v: %s", err, bytes.TrimSpace(out))
	}
	caPEM, err := os.ReadFile(filepath.Join(e.caDir, "ca.pem"))
	if err != nil {
		return e, err
	}
	gwPool := x509.NewCertPool()
	if !gwPool.AppendCertsFromPEM(caPEM) {
		return e, errors.New("no certificate in the gateway's ca.pem")
	}
	// No ClientSessionCache: every operation is a full handshake.
	e.plainTLS = &tls.Config{RootCAs: e.up.pool, ServerName: soakPlainHost, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	e.injectTLS = &tls.Config{RootCAs: gwPool, ServerName: soakInjectHost, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	port := strconv.Itoa(e.up.addr.Port)
	hosts := [numOpKinds]string{soakPlainHost, soakInjectHost, soakDeniedHost}
	for k, h := range hosts {
		hp := h + ":" + port
		e.connect[k] = []byte("CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\nUser-Agent: hookgate-bench/1\r\n\r\n")
	}
	e.request[opPlain] = []byte("GET /small HTTP/1.1\r\nHost: " + soakPlainHost + ":" + port + "\r\nUser-Agent: hookgate-bench/1\r\nAccept: */*\r\n\r\n")
	// The sandbox's own Authorization must be replaced, not passed on.
	e.request[opInject] = []byte("GET /auth HTTP/1.1\r\nHost: " + soakInjectHost + ":" + port +
		"\r\nUser-Agent: hookgate-bench/1\r\nAccept: */*\r\nAuthorization: " + soakFakeAuth + "\r\n\r\n")

	e.cfgPath = filepath.Join(o.dir, "gateway-soak.yaml")
	if err := e.writeConfig(); err != nil {
		return e, err
	}
	env := append(os.Environ(), soakTokenEnv+"="+e.up.token)
	if e.g, e.proxy, e.admin, err = startSoakGateway(o, e.cfgPath, e.up.addr.String(), env); err != nil {
		return e, err
	}
	return e, nil
}

func (e *soakEnv) close() {
	if e.g != nil {
		e.g.stop()
	}
	if e.dns != nil {
		e.dns.close()
	}
	if e.up != nil {
		e.up.close()
	}
}

// writeConfig writes the gateway's config, with the toggle entry when
// e.toggle is set, atomically (a reload never reads half a file).
func (e *soakEnv) writeConfig() error {
	var b strings.Builder
	b.WriteString("# written by bench (soak)\n")
	b.WriteString("listen: {proxy: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\n")
	b.WriteString("network:\n  allowlist:\n")
	fmt.Fprintf(&b, "    - domain: %s\n      transform:\n        Authorization: \"Bearer ${env:%s}\"\n", soakInjectHost, soakTokenEnv)
	fmt.Fprintf(&b, "    - domain: %s\n", soakPlainHost)
	if e.toggle {
		fmt.Fprintf(&b, "    - domain: %s\n", soakToggleHost)
	}
	fmt.Fprintf(&b, "  dns: {servers: [%q]}\n", e.dns.addr)
	fmt.Fprintf(&b, "upstream: {ca_file: %q}\n", e.up.pemPath)
	fmt.Fprintf(&b, "ca: {cert_file: %q, key_file: %q}\n", filepath.Join(e.caDir, "ca.pem"), filepath.Join(e.caDir, "ca-key.pem"))
	fmt.Fprintf(&b, "limits: {max_connections_per_client: %d}\n", e.o.limit)
	b.WriteString("log: {level: info}\n")
	tmp := e.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, e.cfgPath)
}

// startSoakGateway starts `gateway serve` pinned like the other scenarios,
// with stderr to a file, and reads the proxy and admin addresses from its
// "gateway listening" line.
func startSoakGateway(o soakOptions, cfgPath, upstream string, env []string) (*gateway, string, string, error) {
	logPath := filepath.Join(o.dir, "gateway-soak.log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, "", "", err
	}
	defer f.Close()
	cmd := exec.Command(o.bin, "serve", "--config", cfgPath, "--test-allow-upstream", upstream)
	cmd.Env = env
	cmd.Stderr = f
	g := &gateway{cmd: cmd, done: make(chan struct{}), stderr: logPath}
	if err := g.launch(o.cpu); err != nil {
		return nil, "", "", err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if proxy, admin, ok := listeningLine(logPath); ok {
			if proxy == "" || admin == "" {
				g.stop()
				return nil, "", "", fmt.Errorf("gateway listening line without proxy/admin (%q, %q)", proxy, admin)
			}
			g.addr = proxy
			g.listening(o.cpu)
			return g, proxy, admin, nil
		}
		if err := g.alive(); err != nil {
			return nil, "", "", fmt.Errorf("gateway exited at start: %w", err)
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, "", "", fmt.Errorf("no \"gateway listening\" line after 10s%s", g.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func listeningLine(path string) (proxy, admin string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var v struct {
			Message string `json:"message"`
			Proxy   string `json:"proxy"`
			Admin   string `json:"admin"`
		}
		if json.Unmarshal(line, &v) == nil && v.Message == "gateway listening" {
			return v.Proxy, v.Admin, true
		}
	}
	return "", "", false
}

// sample is one successful operation.
type sample struct {
	start time.Time
	dur   time.Duration
	kind  opKind
}

type reloadRec struct {
	start, end time.Time
	err        error
}

// run drives n operations with o.clients clients, each doing one operation
// at a time (kinds interleaved by the -soak-mix weights); with reloading, a config
// rewrite + POST /v1/reload every o.reloadEvery until the operations are
// done. Bounded by o.runTimeout.
func (e *soakEnv) run(n int, reloading bool) (soakRun, measurement) {
	r := soakRun{Reloading: reloading, ErrorKinds: map[string]int64{}, FirstErrors: map[string]string{}}
	start := time.Now()
	hardEnd := start.Add(e.o.runTimeout)
	tok0, bad0, q0, dq0 := e.up.tokenOK.Load(), e.up.tokenBad.Load(), e.dns.queries.Load(), e.dns.watchedQueries.Load()
	snap0 := snapCPU(e.g.pid)

	var (
		next    atomic.Int64
		mu      sync.Mutex
		samples []sample
		wg      sync.WaitGroup
		ok      [numOpKinds]atomic.Int64
	)
	var reloads []reloadRec
	stop := make(chan struct{})
	reloadDone := make(chan struct{})
	if reloading {
		go func() {
			defer close(reloadDone)
			t := time.NewTicker(e.o.reloadEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				rec := reloadRec{start: time.Now()}
				rec.err = e.reload()
				rec.end = time.Now()
				reloads = append(reloads, rec)
			}
		}()
	} else {
		close(reloadDone)
	}
	for c := 0; c < e.o.clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16<<10)
			var local []sample
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || time.Now().After(hardEnd) {
					break
				}
				kind := e.kindOf(i)
				t0 := time.Now()
				dur, errKind, err := e.op(kind, buf)
				if err != nil {
					mu.Lock()
					r.Errors++
					key := opNames[kind] + ": " + errKind
					r.ErrorKinds[key]++
					if _, seen := r.FirstErrors[key]; !seen {
						msg := err.Error()
						if len(msg) > 300 {
							msg = msg[:300]
						}
						r.FirstErrors[key] = msg
					}
					mu.Unlock()
					continue
				}
				ok[kind].Add(1)
				local = append(local, sample{start: t0, dur: dur, kind: kind})
			}
			mu.Lock()
			samples = append(samples, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	end := time.Now()
	close(stop)
	<-reloadDone
	snap1 := snapCPU(e.g.pid)

	r.Plain, r.Injected, r.Denied = ok[opPlain].Load(), ok[opInject].Load(), ok[opDenied].Load()
	r.OK = r.Plain + r.Injected + r.Denied
	r.Ops = r.OK + r.Errors
	r.Seconds = end.Sub(start).Seconds()
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
	}
	all := make([]time.Duration, 0, len(samples))
	var byKind [numOpKinds][]time.Duration
	for _, s := range samples {
		all = append(all, s.dur)
		byKind[s.kind] = append(byKind[s.kind], s.dur)
	}
	r.P50us, r.P99us, r.P999us = percentileUS(all, 0.50), percentileUS(all, 0.99), percentileUS(all, 0.999)
	r.MaxUs = percentileUS(all, 1)
	r.KindP50us, r.KindP99us = map[string]float64{}, map[string]float64{}
	for k := range byKind {
		r.KindP50us[opNames[k]] = percentileUS(byKind[k], 0.50)
		r.KindP99us[opNames[k]] = percentileUS(byKind[k], 0.99)
	}
	for _, rec := range reloads {
		r.Reloads++
		if rec.err != nil {
			r.ReloadsFailed++
			if r.ReloadFirstEr == "" {
				r.ReloadFirstEr = rec.err.Error()
			}
		}
		r.ReloadMaxMs = max(r.ReloadMaxMs, float64(rec.end.Sub(rec.start).Microseconds())/1000)
	}
	if len(reloads) > 0 {
		var ov []time.Duration
		for _, s := range samples {
			sEnd := s.start.Add(s.dur)
			for _, rec := range reloads {
				if s.start.Before(rec.end) && sEnd.After(rec.start) {
					ov = append(ov, s.dur)
					break
				}
			}
		}
		r.OverlapOps = len(ov)
		r.OverlapP99us, r.OverlapMaxUs = percentileUS(ov, 0.99), percentileUS(ov, 1)
	}
	r.UpstreamTokenOK = e.up.tokenOK.Load() - tok0
	r.UpstreamTokenBad = e.up.tokenBad.Load() - bad0
	r.DNSQueries = e.dns.queries.Load() - q0
	r.DeniedLookups = e.dns.watchedQueries.Load() - dq0
	if len(r.ErrorKinds) == 0 {
		r.ErrorKinds, r.FirstErrors = nil, nil
	}

	m := measurement{Requests: r.OK, Errors: r.Errors, Seconds: r.Seconds, RPS: r.OpsPerSec, P50us: r.P50us, P99us: r.P99us}
	for _, k := range slices.Sorted(maps.Keys(r.FirstErrors)) {
		m.FirstError = k + ": " + r.FirstErrors[k]
		break
	}
	snap0.fill(snap1, &m)
	return r, m
}

// kindOf is the kind of operation i: the weights of -soak-mix, interleaved.
func (e *soakEnv) kindOf(i int64) opKind {
	sum := 0
	for _, w := range e.o.mix {
		sum += w
	}
	j := int(i % int64(sum))
	for k, w := range e.o.mix {
		if j < w {
			return opKind(k)
		}
		j -= w
	}
	return opDenied
}

// parseMix reads "plain:inject:denied" weights, e.g. "1:1:1" or "0:1:0".
func parseMix(s string) ([numOpKinds]int, error) {
	var m [numOpKinds]int
	parts := strings.Split(s, ":")
	sum := 0
	if len(parts) != int(numOpKinds) {
		return m, fmt.Errorf("want plain:inject:denied weights, e.g. 1:1:1, got %q", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 1000 {
			return m, fmt.Errorf("bad weight %q in %q", p, s)
		}
		m[i], sum = n, sum+n
	}
	if sum == 0 {
		return m, fmt.Errorf("all weights zero in %q", s)
	}
	return m, nil
}

// op performs one operation on a new connection and returns its latency
// (dial to response read; the graceful close after it is bounded but not
// timed). errKind is a short category for the report.
//
// Every connection is closed gracefully: the client half-closes (TLS
// close_notify, then TCP FIN) and reads until the gateway closes its side,
// so a client never opens its next connection while the gateway still holds
// its previous one — the clients hold at most -c connections at any time,
// exactly the per-client limit.
func (e *soakEnv) op(kind opKind, buf []byte) (time.Duration, string, error) {
	t0 := time.Now()
	deadline := t0.Add(e.o.opTimeout)
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", e.proxy)
	if err != nil {
		return 0, "dial", err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(e.connect[kind]); err != nil {
		return 0, "CONNECT i/o", err
	}
	br := bufio.NewReaderSize(c, 4<<10)
	status, proxyErr, clen, err := readHead(br)
	if err != nil {
		return 0, "CONNECT i/o", fmt.Errorf("CONNECT: %w", err)
	}
	if kind == opDenied {
		if status != http.StatusForbidden || proxyErr != "blocked-by-allowlist" {
			return 0, fmt.Sprintf("CONNECT %d %s (want 403 blocked-by-allowlist)", status, proxyErr),
				fmt.Errorf("CONNECT %s answered %d X-Proxy-Error %q", soakDeniedHost, status, proxyErr)
		}
		if clen > 0 {
			if _, err := discardN(br, clen, buf); err != nil {
				return 0, "403 body", err
			}
		}
		dur := time.Since(t0)
		if err := closeAndDrain(c, nil, br, buf); err != nil {
			return dur, "close", err
		}
		return dur, "", nil
	}
	if status != http.StatusOK {
		return 0, fmt.Sprintf("CONNECT %d %s", status, proxyErr), fmt.Errorf("CONNECT answered %d X-Proxy-Error %q", status, proxyErr)
	}
	var raw net.Conn = c
	if br.Buffered() > 0 {
		raw = &bufferedConn{Conn: c, r: br}
	}
	cfg := e.plainTLS
	if kind == opInject {
		cfg = e.injectTLS
	}
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		return 0, "TLS handshake", err
	}
	if _, err := tc.Write(e.request[kind]); err != nil {
		return 0, "request i/o", err
	}
	tr := bufio.NewReaderSize(tc, 4<<10)
	if head, err := tr.Peek(12); err == nil && !bytes.HasPrefix(head[9:], []byte("200")) {
		code := string(head[9:12])
		if kind == opInject && (code == "401" || code == "400") {
			return 0, "upstream did not get the bearer token (" + code + ")", fmt.Errorf("GET /auth answered %s", code)
		}
	}
	if _, err := readResponse(tr, buf); err != nil {
		return 0, "response", err
	}
	dur := time.Since(t0)
	if err := closeAndDrain(c, tc, tr, buf); err != nil {
		return dur, "close", err
	}
	return dur, "", nil
}

// readHead reads a response's status line and headers (not the body).
func readHead(br *bufio.Reader) (status int, proxyErr string, clen int64, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, "", 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, "", 0, fmt.Errorf("status line %q", bytes.TrimSpace(line))
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, "", 0, fmt.Errorf("status line %q", bytes.TrimSpace(line))
	}
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, "", 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return status, proxyErr, clen, nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("X-Proxy-Error")):
			proxyErr = string(v)
		case bytes.EqualFold(k, []byte("Content-Length")):
			clen, _ = strconv.ParseInt(string(v), 10, 64)
		}
	}
}

// closeAndDrain half-closes (TLS close_notify when tc is set, then TCP FIN)
// and reads until the gateway closes its side of the TCP connection; the
// connection's deadline bounds it. Through a TLS tunnel the first EOF is the
// peer's close_notify (for an opaque tunnel the upstream's, relayed): the
// TCP FIN from the gateway comes after it, so the raw connection is read on
// to its own EOF.
func closeAndDrain(c net.Conn, tc *tls.Conn, r io.Reader, buf []byte) error {
	if tc != nil {
		if err := tc.CloseWrite(); err != nil {
			return fmt.Errorf("close_notify: %w", err)
		}
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		if err := tcp.CloseWrite(); err != nil {
			return fmt.Errorf("FIN: %w", err)
		}
	}
	if err := drain(r, buf); err != nil {
		return err
	}
	if tc != nil {
		return drain(c, buf) // the bufio reader under TLS is tc's; c has no buffer of ours
	}
	return nil
}

func drain(r io.Reader, buf []byte) error {
	for {
		_, err := r.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("waiting for the gateway to close: %w", err)
		}
	}
}

// reload rewrites the config (the toggle entry added or removed) and asks
// the gateway to reload it.
func (e *soakEnv) reload() error {
	e.toggle = !e.toggle
	if err := e.writeConfig(); err != nil {
		return err
	}
	resp, err := e.httpc.Post("http://"+e.admin+"/v1/reload", "application/json", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /v1/reload: %d %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// mem reads the gateway's RSS and descriptors from /proc and its heap,
// goroutines and active tunnels from /metrics.
func (e *soakEnv) mem() (m soakMem) {
	var err error
	if m.RSSKiB, err = rssKiB(e.g.pid); err != nil {
		m.Err = err.Error()
	}
	defer func() { // after the GET: its keep-alive connection is always counted
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", e.g.pid)); err == nil {
			m.OpenFDs = int64(len(ents))
		}
	}()
	resp, err := e.httpc.Get("http://" + e.admin + "/metrics")
	if err != nil {
		m.Err = err.Error()
		return m
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		m.Err = err.Error()
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.HeapInuseKiB = int64(v) / 1024
		case "go_goroutines":
			m.Goroutines = int64(v)
		case "hookgate_active_tunnels":
			m.ActiveTunnels = v
		case "hookgate_active_connections":
			m.ActiveConns = v
		}
	}
	return m
}

// scanLog counts the gateway log's warn/error lines (the TEST MODE notice
// aside) and its "config reloaded" lines.
func (e *soakEnv) scanLog(res *soakResult) {
	f, err := os.Open(e.g.stderr)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		res.LogBytes = fi.Size()
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Contains(line, []byte(`"message":"config reloaded"`)) {
			res.LogReloads++
		}
		if !bytes.Contains(line, []byte(`"level":"warn"`)) && !bytes.Contains(line, []byte(`"level":"error"`)) {
			continue
		}
		if bytes.Contains(line, []byte("TEST MODE")) {
			continue
		}
		res.LogProblems++
		var v struct {
			Message string `json:"message"`
			Code    string `json:"code"`
			Reason  string `json:"reason"`
			Error   string `json:"error"`
		}
		_ = json.Unmarshal(line, &v)
		key := v.Message + " " + v.Code
		if !seen[key] && len(res.LogProblemMsgs) < 5 {
			seen[key] = true
			s := string(line)
			if len(s) > 400 {
				s = s[:400]
			}
			res.LogProblemMsgs = append(res.LogProblemMsgs, s)
		}
	}
}

// soakUpstream is the origin of the soak: TLS only, HTTP/1.1, with a
// certificate for the soak's names. /auth answers 200 only when it received
// exactly one Authorization header equal to the gateway's token (compared as
// SHA-256 digests; the token is never echoed), 401 otherwise.
type soakUpstream struct {
	srv      *http.Server
	addr     *net.TCPAddr
	pool     *x509.CertPool
	pemPath  string
	token    string
	want     [32]byte
	small    []byte
	tokenOK  atomic.Int64
	tokenBad atomic.Int64
}

func startSoakUpstream(pemPath string) (*soakUpstream, error) {
	cert, pool, err := selfSigned(soakPlainHost, soakInjectHost, soakDeniedHost, soakToggleHost)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		return nil, err
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	u := &soakUpstream{pool: pool, pemPath: pemPath, token: hex.EncodeToString(raw[:]), small: bytes.Repeat([]byte("a"), 1024)}
	u.want = sha256.Sum256([]byte("Bearer " + u.token))
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(u.small)))
		w.Write(u.small) //nolint:errcheck
	})
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) {
		vals := r.Header.Values("Authorization")
		if len(vals) == 1 {
			got := sha256.Sum256([]byte(vals[0]))
			if subtle.ConstantTimeCompare(got[:], u.want[:]) == 1 {
				u.tokenOK.Add(1)
				w.Header().Set("Content-Length", "2")
				io.WriteString(w, "ok") //nolint:errcheck
				return
			}
		}
		u.tokenBad.Add(1)
		w.Header().Set("Content-Length", "3")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "bad") //nolint:errcheck
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u.addr = l.Addr().(*net.TCPAddr)
	u.srv = &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
		ErrorLog:          log.New(discardWriter{}, "", 0),
	}
	go u.srv.Serve(tls.NewListener(l, u.srv.TLSConfig)) //nolint:errcheck // ends at Close
	return u, nil
}

func (u *soakUpstream) close() { u.srv.Close() }

// startSoakDNS answers A queries for names with 127.0.0.1, AAAA with no
// answer, anything else with NXDOMAIN, and watches soakDeniedHost.
func startSoakDNS(names ...string) (*loopbackDNS, error) {
	known := map[string]bool{}
	for _, n := range names {
		known[dns.Fqdn(n)] = true
	}
	return startLoopbackDNS(dns.Fqdn(soakDeniedHost), func(name string) net.IP {
		if !known[name] {
			return nil
		}
		return net.IPv4(127, 0, 0, 1)
	})
}

// printSoakRow is the soak's line in the table: the "d/p" pairs are
// without/with reloads, ratio is p99(with)/p99(without), target ≤ 2.
func printSoakRow(tw io.Writer, r row) {
	s := r.Soak
	fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%.3f\t≤ %.2f\t%s\t%s/%s\t%s/%s\t%.0f%%\t%.0f%%/%.0f%%\t%.0f%%/%.0f%%\t%d/%d\t\n",
		r.Scenario, r.Log, r.Direct.RPS, r.Proxied.RPS, r.Unit, r.Ratio, r.Target, mark(r.Pass)+soakNoisy(r),
		us(s.Quiet.P50us), us(s.Reload.P50us), us(s.Quiet.P99us), us(s.Reload.P99us),
		100*r.Proxied.GatewayCPU, 100*r.Direct.BenchCPU, 100*r.Proxied.BenchCPU,
		100*soakOther(r.Direct), 100*soakOther(r.Proxied), s.Quiet.Errors, s.Reload.Errors)
}

func soakNoisy(r row) string {
	if max(soakOther(r.Direct), soakOther(r.Proxied)) > maxOtherLoad {
		return "?"
	}
	return ""
}

// printSoakDetails prints what the table row cannot hold.
func printSoakDetails(w io.Writer, s *soakResult) {
	if s.FatalError != "" {
		fmt.Fprintf(w, "soak: FAILED: %s\n", s.FatalError)
		return
	}
	q, r := s.Quiet, s.Reload
	fmt.Fprintf(w, "soak: %d ops/run (plain tunnel : injected : denied = %s) by %d clients at max_connections_per_client %d; attempt %d, %d ops in all incl. warm-up\n",
		s.OpsPerRun, s.Mix, s.Clients, s.Limit, s.Attempts, s.TotalOps)
	for _, x := range []soakRun{q, r} {
		label := "without reloads"
		if x.Reloading {
			label = "with reloads   "
		}
		fmt.Fprintf(w, "soak:   %s ok %d (plain %d, injected %d [upstream saw the token %d, wrong/missing %d], denied as intended %d), errors %d; %.1fs; p50/p99/p99.9/max %s/%s/%s/%s; p99 plain/inject/denied %s/%s/%s; DNS queries %d (of the denied name %d)\n",
			label, x.OK, x.Plain, x.Injected, x.UpstreamTokenOK, x.UpstreamTokenBad, x.Denied, x.Errors, x.Seconds,
			lat(x.P50us), lat(x.P99us), lat(x.P999us), lat(x.MaxUs),
			lat(x.KindP99us["plain"]), lat(x.KindP99us["inject"]), lat(x.KindP99us["denied"]), x.DNSQueries, x.DeniedLookups)
		for _, k := range slices.Sorted(maps.Keys(x.ErrorKinds)) {
			fmt.Fprintf(w, "soak:     error %q ×%d, first: %s\n", k, x.ErrorKinds[k], x.FirstErrors[k])
		}
	}
	if s.AllErrors > q.Errors+r.Errors {
		for _, k := range slices.Sorted(maps.Keys(s.AllErrorKinds)) {
			fmt.Fprintf(w, "soak:   warm-up + all attempts: error %q ×%d, first: %s\n", k, s.AllErrorKinds[k], s.AllFirstErrs[k])
		}
	}
	fmt.Fprintf(w, "soak:   reloads %d (failed %d, slowest %.1f ms); %d ops overlapped a reload: p99 %s, max %s; gateway logged %d \"config reloaded\"\n",
		r.Reloads, r.ReloadsFailed, r.ReloadMaxMs, r.OverlapOps, lat(r.OverlapP99us), lat(r.OverlapMaxUs), s.LogReloads)
	if r.ReloadFirstEr != "" {
		fmt.Fprintf(w, "soak:   first reload error: %s\n", r.ReloadFirstEr)
	}
	a, b, c, d := s.MemStart, s.MemAfterFirst, s.MemEnd, s.MemSettled
	fmt.Fprintf(w, "soak:   memory start → after run 1 → end → settled %.0fs: RSS %d → %d → %d → %d KiB (%+.1f KiB/1000 ops overall, %+.1f steady); heap in use %d → %d → %d → %d KiB (%+.1f KiB/1000 ops); flat: %v\n",
		s.SettleSeconds, a.RSSKiB, b.RSSKiB, c.RSSKiB, d.RSSKiB, s.RSSPerKOpsKiB, s.SteadyRSSPerKOpsKiB,
		a.HeapInuseKiB, b.HeapInuseKiB, c.HeapInuseKiB, d.HeapInuseKiB, s.HeapPerKOpsKiB, s.MemoryFlat)
	fmt.Fprintf(w, "soak:   goroutines %d → %d → %d → %d; open fds %d → %d → %d → %d; hookgate_active_tunnels at end %.0f, settled %.0f; active connections settled %.0f\n",
		a.Goroutines, b.Goroutines, c.Goroutines, d.Goroutines, a.OpenFDs, b.OpenFDs, c.OpenFDs, d.OpenFDs,
		c.ActiveTunnels, d.ActiveTunnels, d.ActiveConns)
	for _, m := range []soakMem{a, b, c, d} {
		if m.Err != "" {
			fmt.Fprintf(w, "soak:   memory reading error: %s\n", m.Err)
			break
		}
	}
	fmt.Fprintf(w, "soak:   gateway log %d KiB, %d warn/error lines (TEST MODE notice aside)\n", s.LogBytes>>10, s.LogProblems)
	for _, l := range s.LogProblemMsgs {
		fmt.Fprintf(w, "soak:     %s\n", l)
	}
}

// lat formats a latency in µs with its unit.
func lat(v float64) string {
	if v >= 10000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "µs"
}
