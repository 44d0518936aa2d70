//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// The transparent-mode figures: a 1 GiB TLS download
// and new connections per second through `gateway sandbox exec` against
// the same client straight to the upstream, and the time the sandbox's DNS
// server takes to answer an allowlisted name from its cache. See
// bench/README.md ("transparent").
//
// The client cannot run in this process: it must live inside the sandbox's
// network namespace. So this binary re-executes itself in a client role
// (-role transparent-client -spec JSON), once as `gateway sandbox exec --
// <self> ...` (proxied) and once as a plain child (direct); the role runs
// one task and prints its measurement as JSON on stdout. The upstream and
// the gateway's upstream resolver stay in this process.

const tpRole = "transparent-client"

type tpOptions struct {
	bin        string
	dir        string
	gwCPU      int // -1: not pinned
	benchCPU   int
	lc         loadConfig
	size       int64
	dlTimeout  time.Duration
	retries    int
	maxOther   float64
	dnsQueries int
	up         *namedUpstream
	dns        *loopbackDNS
	progress   io.Writer
}

// tpSpec is what the client role is told to do (one task).
type tpSpec struct {
	Task       string        `json:"task"` // download, newconn, dns
	Addr       string        `json:"addr"` // dialled, host:port
	ServerName string        `json:"server_name"`
	CAFile     string        `json:"ca_file"`
	Size       int64         `json:"size"`
	DLTimeout  time.Duration `json:"dl_timeout"`
	Clients    int           `json:"clients"`
	Warmup     time.Duration `json:"warmup"`
	Duration   time.Duration `json:"duration"`
	MaxReqs    int64         `json:"max_reqs"`
	GatewayCPU int           `json:"gateway_cpu"` // -1: not pinned
	BenchCPU   int           `json:"bench_cpu"`
	PeerPIDs   []int         `json:"peer_pids"`  // their CPU counts as the bench's (the upstream)
	ViaParent  bool          `json:"via_parent"` // through the gateway (sandbox exec): CPU snapshots write marks
	DNSServer  string        `json:"dns_server"`
	DNSName    string        `json:"dns_name"`
	DNSQueries int           `json:"dns_queries"`
}

type tpResult struct {
	M     measurement      `json:"m"`
	DNS   *dnsClientResult `json:"dns,omitempty"`
	Error string           `json:"error,omitempty"`
}

// dnsClientResult is the sandbox DNS figure: client round trips (inside
// the namespace, through the nftables redirect) and the server's own
// duration_ms from its decision lines.
type dnsClientResult struct {
	Queries    int     `json:"queries"`
	Answers    int     `json:"answers"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	FirstUs    float64 `json:"first_rtt_us"` // the first query: a cache miss
	P50us      float64 `json:"rtt_p50_us"`
	P99us      float64 `json:"rtt_p99_us"`
	MaxUs      float64 `json:"rtt_max_us"`
	// From the gateway's log (info): answers for the name, cached or not.
	ServerCached   int     `json:"server_cached_answers"`
	ServerP50us    float64 `json:"server_cached_p50_us"`
	ServerP99us    float64 `json:"server_cached_p99_us"`
	ServerMaxUs    float64 `json:"server_cached_max_us"`
	ServerMissUs   float64 `json:"server_miss_us"` // the uncached answer(s), max
	ServerMisses   int     `json:"server_misses"`
	ServerVerdicts string  `json:"server_verdicts,omitempty"`
}

// clientRole is main for -role transparent-client: run one task, print a
// tpResult as JSON on stdout. Exit status 0 whenever JSON was printed.
func clientRole(args []string) int {
	fs := flag.NewFlagSet("bench "+tpRole, flag.ContinueOnError)
	role := fs.String("role", "", "")
	specJSON := fs.String("spec", "", "")
	if err := fs.Parse(args); err != nil || *role != tpRole {
		fmt.Fprintf(os.Stderr, "bench: unknown role %q\n", *role)
		return 2
	}
	var sp tpSpec
	if err := json.Unmarshal([]byte(*specJSON), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -spec:", err)
		return 2
	}
	res := runClientTask(sp)
	b, _ := json.Marshal(res)
	os.Stdout.Write(append(b, '\n')) //nolint:errcheck
	return 0
}

func runClientTask(sp tpSpec) (res tpResult) {
	// Born with the gateway's affinity (sandbox exec forks us from its
	// pinned thread): move every thread of ours to the bench core.
	if sp.BenchCPU >= 0 {
		if err := pinSelf(sp.BenchCPU); err != nil {
			res.Error = err.Error()
			return res
		}
		pinnedCPUs = [2]int{sp.GatewayCPU, sp.BenchCPU}
	}
	benchPeers = sp.PeerPIDs
	gwPID := 0
	if sp.ViaParent {
		// The gateway and the peers are outside our PID namespace: the
		// parent reads their CPU time at our marks.
		gwPID, benchPeers = gwPIDByMark, nil
	}
	pem, err := os.ReadFile(sp.CAFile)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		res.Error = "no certificate in " + sp.CAFile
		return res
	}
	t := hostTarget{addr: sp.Addr, gwPID: gwPID, tls: tlsFor(pool, sp.ServerName)}
	lc := loadConfig{clients: sp.Clients, warmup: sp.Warmup, duration: sp.Duration, maxReqs: sp.MaxReqs, maxSamples: 200_000}
	switch sp.Task {
	case "download":
		res.M = tlsDownload(t, sp.Size, sp.DLTimeout)
	case "newconn":
		res.M = tlsNewConnLoad(t, lc)
	case "dns":
		res.DNS = dnsClient(sp)
	default:
		res.Error = "unknown task " + sp.Task
	}
	return res
}

// dnsClient sends sp.DNSQueries A queries for sp.DNSName, one at a time,
// over one UDP socket; the first is a cache miss at the server.
func dnsClient(sp tpSpec) *dnsClientResult {
	r := &dnsClientResult{}
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	conn, err := c.Dial(sp.DNSServer)
	if err != nil {
		r.Errors, r.FirstError = 1, err.Error()
		return r
	}
	defer conn.Close()
	var rtts []time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; i <= sp.DNSQueries && time.Now().Before(deadline); i++ {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(sp.DNSName), dns.TypeA)
		r.Queries++
		in, rtt, err := c.ExchangeWithConn(m, conn)
		if err == nil && (in.Rcode != dns.RcodeSuccess || len(in.Answer) == 0) {
			err = fmt.Errorf("answer %s with %d records", dns.RcodeToString[in.Rcode], len(in.Answer))
		}
		if err != nil {
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = err.Error()
			}
			continue
		}
		r.Answers++
		if i == 0 {
			r.FirstUs = float64(rtt.Nanoseconds()) / 1e3
			continue
		}
		rtts = append(rtts, rtt)
	}
	r.P50us, r.P99us, r.MaxUs = percentileUS(rtts, 0.5), percentileUS(rtts, 0.99), percentileUS(rtts, 1)
	return r
}

func runTransparent(o tpOptions) ([]row, error) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(o.progress, "  transparent: SKIPPED: needs root (gateway sandbox exec creates a network namespace and nftables rules); run the bench as root")
		return nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tdir := filepath.Join(o.dir, "transparent")
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return nil, err
	}
	writeCfg := func(level string) (string, error) {
		var b strings.Builder
		b.WriteString("# written by bench (transparent)\n")
		b.WriteString("network:\n  allowlist:\n")
		fmt.Fprintf(&b, "    - domain: %s\n    - domain: %s\n", tpHost, dnsTestHost)
		b.WriteString("    - domain: \"127.0.0.1\"\n") // the no-SNI variant: judged by the original destination
		fmt.Fprintf(&b, "  dns: {servers: [%q]}\n", o.dns.addr)
		b.WriteString("limits: {max_connections: 0, max_connections_per_client: 0}\n")
		fmt.Fprintf(&b, "log: {level: %s}\n", level)
		p := filepath.Join(tdir, "gateway-transparent-"+level+".yaml")
		return p, os.WriteFile(p, []byte(b.String()), 0o600)
	}
	cfgWarn, err := writeCfg("warn")
	if err != nil {
		return nil, err
	}
	cfgInfo, err := writeCfg("info")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(int(o.up.addr.Port()))
	base := tpSpec{
		ServerName: tpHost, CAFile: o.up.pemPath, Size: o.size, DLTimeout: o.dlTimeout,
		Clients: o.lc.clients, Warmup: o.lc.warmup, Duration: o.lc.duration, MaxReqs: o.lc.maxReqs,
		GatewayCPU: o.gwCPU, BenchCPU: o.benchCPU, PeerPIDs: []int{os.Getpid()},
	}
	if o.gwCPU < 0 {
		base.BenchCPU = -1
	}
	// Bound on one client run: its own bounds plus start-up and shutdown.
	bound := 2*(o.lc.warmup+o.lc.duration) + o.dlTimeout + 30*time.Second
	run := func(sp tpSpec, viaGateway bool, cfg, logPath string) (tpResult, error) {
		sp.ViaParent = viaGateway
		js, err := json.Marshal(sp)
		if err != nil {
			return tpResult{}, err
		}
		client := []string{self, "-role", tpRole, "-spec", string(js)}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		var cmd *exec.Cmd
		cpu := o.benchCPU
		if viaGateway {
			// --user 0: the client is this binary and reads files in
			// directories only root can enter; it still has no capabilities.
			args := []string{"sandbox", "exec", "--config", cfg, "--log", logPath, "--user", "0",
				"--test-allow-upstream", o.up.addr.String(), "--"}
			cmd = exec.CommandContext(ctx, o.bin, append(args, client...)...)
			cpu = o.gwCPU
		} else {
			cmd = exec.CommandContext(ctx, client[0], client[1:]...)
		}
		cmd.WaitDelay = 5 * time.Second
		var stderr bytes.Buffer
		stdout := &markWriter{}
		cmd.Stdout, cmd.Stderr = stdout, &limitedBuffer{b: &stderr, n: 16 << 10}
		start := cmd.Start
		if cpu >= 0 {
			start = func() error { return withThreadAffinity(cpu, cmd.Start) }
		}
		if err := start(); err != nil {
			return tpResult{}, err
		}
		if viaGateway && o.gwCPU >= 0 {
			_ = pinProcess(cmd.Process.Pid, o.gwCPU) // its threads only; the client pins itself
		}
		if viaGateway {
			stdout.setGateway(cmd.Process.Pid) // sandbox exec is the gateway
		}
		werr := cmd.Wait()
		var res tpResult
		if err := json.Unmarshal(bytes.TrimSpace(lastLine(stdout.bytes())), &res); err != nil {
			return res, fmt.Errorf("client (%v): no result (%v); stderr: %s", werr, err, tail(stderr.String(), 1500))
		}
		if res.Error != "" {
			return res, fmt.Errorf("client: %s; stderr: %s", res.Error, tail(stderr.String(), 1500))
		}
		stdout.fillGateway(&res.M)
		return res, nil
	}

	var rows []row
	type task struct {
		name, task string
		unit       string
		target     float64
		addr       string // proxied: what the sandboxed client dials
		serverName string
	}
	for _, tk := range []task{
		{"transparent-download", "download", "MiB/s", 0.95, tpDialAddr + ":" + port, tpHost},
		{"transparent-newconn", "newconn", "req/s", 0.85, tpDialAddr + ":" + port, tpHost},
		// Without SNI: routed by the original destination as an IP literal
		// (127.0.0.1, exempted for the test), so the gateway makes no DNS
		// lookup: the cost of the path itself.
		{"transparent-newconn-ip", "newconn", "req/s", 0.85, "127.0.0.1:" + port, "127.0.0.1"},
	} {
		var runErr error
		rows = append(rows, pairRetry(o.retries, o.maxOther, func(int) ([]row, float64) {
			sp := base
			sp.Task, sp.Addr, sp.ServerName = tk.task, o.up.addr.String(), tk.serverName
			fmt.Fprintf(o.progress, "  %-22s direct...", tk.name)
			d, err := run(sp, false, "", "")
			if err != nil {
				runErr = fmt.Errorf("%s direct: %w", tk.name, err)
			}
			sp.Addr = tk.addr
			fmt.Fprintf(o.progress, " %s; transparent...", tpFigure(d.M, tk.unit))
			q0 := o.dns.queries.Load()
			p, err := run(sp, true, cfgWarn, filepath.Join(tdir, "gateway-"+tk.name+".log"))
			q := o.dns.queries.Load() - q0
			if err != nil && runErr == nil {
				runErr = fmt.Errorf("%s transparent: %w", tk.name, err)
			}
			fmt.Fprintf(o.progress, " %s (gateway %.0f%% CPU, other load %.0f%%)\n", tpFigure(p.M, tk.unit), 100*p.M.GatewayCPU, 100*foreignLoad(d.M, p.M))
			dv, pv := d.M.RPS, p.M.RPS
			if tk.unit == "MiB/s" {
				dv, pv = d.M.MiBps, p.M.MiBps
			}
			r := mkRow(tk.name, "warn", tk.unit, tk.target, d.M, p.M, dv, pv)
			if tk.task == "newconn" {
				r.Note = fmt.Sprintf("%s: the gateway made %d upstream DNS queries (%.2f per measured request; warm-up included), answered on the bench core", tk.name, q, float64(q)/max(1, float64(p.M.Requests)))
			}
			return []row{r}, foreignLoad(d.M, p.M)
		})...)
		if runErr != nil {
			fmt.Fprintf(o.progress, "  %s: %v\n", tk.name, runErr)
		}
	}

	// DNS: a fresh sandbox at log level info, so that every answer is a
	// decision line with the server's own duration.
	fmt.Fprintf(o.progress, "  transparent-dns        %d queries for %s from inside the sandbox...", o.dnsQueries, dnsTestHost)
	sp := base
	sp.Task, sp.DNSServer, sp.DNSName, sp.DNSQueries = "dns", tpDNSAddr, dnsTestHost, o.dnsQueries
	logPath := filepath.Join(tdir, "gateway-transparent-dns.log")
	res, err := run(sp, true, cfgInfo, logPath)
	dr := res.DNS
	if dr == nil {
		dr = &dnsClientResult{Errors: 1, FirstError: "no result"}
	}
	if err != nil {
		dr.Errors++
		if dr.FirstError == "" || dr.FirstError == "no result" {
			dr.FirstError = err.Error()
		}
	}
	serverDNS(logPath, dnsTestHost, dr)
	fmt.Fprintf(o.progress, " server (cached) p50 %s p99 %s; client round trip p50 %s\n", lat(dr.ServerP50us), lat(dr.ServerP99us), lat(dr.P50us))
	rows = append(rows, row{Scenario: "transparent-dns", Log: "info", Unit: "µs", Target: 100, Ratio: dr.ServerP99us,
		Pass: dr.Errors == 0 && dr.ServerCached > 0 && dr.ServerP99us < 100, DNS: dr})
	return rows, nil
}

// serverDNS reads the gateway's decision lines for name: durations of the
// cached answers (p50/p99/max) and of the misses.
func serverDNS(path, name string, r *dnsClientResult) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	var cached []time.Duration
	verdicts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var v struct {
			Message  string  `json:"message"`
			Name     string  `json:"name"`
			Verdict  string  `json:"verdict"`
			Cached   bool    `json:"cached"`
			Duration float64 `json:"duration_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &v) != nil || v.Message != "dns" || !strings.EqualFold(strings.TrimSuffix(v.Name, "."), name) {
			continue
		}
		verdicts[v.Verdict]++
		if v.Verdict != "answer" {
			continue
		}
		d := time.Duration(v.Duration * float64(time.Millisecond))
		if v.Cached {
			cached = append(cached, d)
		} else {
			r.ServerMisses++
			r.ServerMissUs = max(r.ServerMissUs, float64(d.Nanoseconds())/1e3)
		}
	}
	r.ServerCached = len(cached)
	r.ServerP50us, r.ServerP99us, r.ServerMaxUs = percentileUS(cached, 0.5), percentileUS(cached, 0.99), percentileUS(cached, 1)
	var vs []string
	for k, n := range verdicts {
		vs = append(vs, k+" "+strconv.Itoa(n))
	}
	r.ServerVerdicts = strings.Join(vs, ", ")
}

func printDNSRow(w io.Writer, r row) {
	d := r.DNS
	fmt.Fprintf(w, "%s\t%s\t-\t%.0f\t%s\t-\t< %.0f\t%s\tsrv %s/cl %s\tsrv %s/cl %s\t\t\t\t%d\t\n",
		r.Scenario, r.Log, d.ServerP99us, r.Unit, r.Target, mark(r.Pass), us(d.ServerP50us), us(d.P50us), us(d.ServerP99us), us(d.P99us), d.Errors)
}

func printDNSDetails(w io.Writer, d *dnsClientResult) {
	fmt.Fprintf(w, "transparent-dns: %d A queries for %s from inside the sandbox (%d answered); at the server (decision lines' duration_ms): %d cached answers p50/p99/max %s/%s/%s, %d miss(es) up to %s (upstream lookup); verdicts: %s\n",
		d.Queries, dnsTestHost, d.Answers, d.ServerCached, lat(d.ServerP50us), lat(d.ServerP99us), lat(d.ServerMaxUs), d.ServerMisses, lat(d.ServerMissUs), d.ServerVerdicts)
	fmt.Fprintf(w, "transparent-dns: client round trip (one UDP socket, through the namespace's redirect; client on the bench core, server on the gateway's): first %s, then p50/p99/max %s/%s/%s\n",
		lat(d.FirstUs), lat(d.P50us), lat(d.P99us), lat(d.MaxUs))
	if d.FirstError != "" {
		fmt.Fprintf(w, "transparent-dns: %d errors, first: %s\n", d.Errors, d.FirstError)
	}
}

func tpFigure(m measurement, unit string) string {
	if m.Errors > 0 && m.Requests == 0 {
		return "FAILED (" + tail(m.FirstError, 200) + ")"
	}
	if unit == "MiB/s" {
		return fmt.Sprintf("%.0f MiB/s", m.MiBps)
	}
	return fmt.Sprintf("%.0f req/s", m.RPS)
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// limitedBuffer keeps the first n bytes written to it and drops the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// cpuMarkLine is what a sandboxed client writes at each CPU snapshot.
const cpuMarkLine = "cpu-mark"

// markWriter is the stdout of a client run: it keeps what the client
// prints and, at each of its mark lines, reads the CPU time of the gateway
// and of this process (the upstream), which a client inside the sandbox
// cannot see. The two marks are the edges of the client's measured window.
type markWriter struct {
	mu      sync.Mutex
	gwPID   int
	buf     bytes.Buffer
	scanned int
	marks   []cpuSnap
}

func (w *markWriter) setGateway(pid int) {
	w.mu.Lock()
	w.gwPID = pid
	w.mu.Unlock()
}

func (w *markWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		rest := w.buf.Bytes()[w.scanned:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		if string(rest[:i]) == cpuMarkLine && w.gwPID > 0 {
			w.marks = append(w.marks, cpuSnap{at: time.Now(), gw: cpuTime(w.gwPID), self: cpuTime(os.Getpid())})
		}
		w.scanned += i + 1
	}
	return len(p), nil
}

func (w *markWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf.Bytes())
}

// fillGateway sets the gateway's CPU share of the window between the two
// marks and adds the upstream's to the bench's, taking both out of the
// other load the client counted on their cores (it could not tell them
// from other processes).
func (w *markWriter) fillGateway(m *measurement) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.marks) != 2 {
		return
	}
	a, b := w.marks[0], w.marks[1]
	sec := b.at.Sub(a.at).Seconds()
	if sec <= 0 {
		return
	}
	m.GatewayCPU = (b.gw - a.gw).Seconds() / sec
	m.OtherOnGatewayCPU = max(0, m.OtherOnGatewayCPU-m.GatewayCPU)
	upstream := (b.self - a.self).Seconds() / sec
	m.BenchCPU += upstream
	m.OtherOnBenchCPU = max(0, m.OtherOnBenchCPU-upstream)
}
