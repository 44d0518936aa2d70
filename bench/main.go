//go:build linux

// Command bench is hookgate's load benchmark: it runs each scenario against
// the gateway and against a direct connection to the same upstream, in one
// run, and prints proxied/direct ratios next to the project's speed targets.
//
//	go run ./bench -gateway /tmp/gw
//
// The gateway child is pinned to one CPU (-gateway-cpu, default 0); this
// process, which is both the load generator and the upstream, is pinned to
// another (-bench-cpu, default 1) with GOMAXPROCS=1. See bench/README.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

type row struct {
	Scenario string      `json:"scenario"`
	Log      string      `json:"log"`
	Unit     string      `json:"unit"`
	Target   float64     `json:"target_ratio"`
	Direct   measurement `json:"direct"`
	Proxied  measurement `json:"proxied"`
	Ratio    float64     `json:"ratio"`
	Pass     bool        `json:"pass"`
	Idle     *idleResult `json:"idle,omitempty"`
	Soak     *soakResult `json:"soak,omitempty"`
	Attempts int         `json:"attempts,omitempty"`
	// mitm and transparent scenarios (mitm.go, transparent.go).
	Leaf *leafResult      `json:"leaf,omitempty"`
	DNS  *dnsClientResult `json:"dns,omitempty"`
	Note string           `json:"note,omitempty"`
}

// foreignLoad is the most CPU other processes took on a core that mattered
// during a direct/proxied pair: the bench core for direct, both for proxied.
func foreignLoad(d, p measurement) float64 {
	return max(d.OtherOnBenchCPU, p.OtherOnGatewayCPU, p.OtherOnBenchCPU)
}

type report struct {
	Meta map[string]any `json:"meta"`
	Rows []row          `json:"rows"`
}

var scenarioNames = []string{"forward", "connect", "newtunnel", "download", "idle", "soak", "mitm", "transparent"}

// defaultScenarios run without -scenarios.
var defaultScenarios = []string{"forward", "connect", "newtunnel", "download", "idle", "soak", "mitm", "transparent"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-role" { // re-executed as the transparent scenario's client
		os.Exit(clientRole(os.Args[1:]))
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		gwBin      = flag.String("gateway", "", "gateway binary; empty: build ./cmd/gateway into a temp dir")
		duration   = flag.Duration("duration", 3*time.Second, "measured time per scenario run (direct and proxied each)")
		warmup     = flag.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up before each run")
		clients    = flag.Int("c", 32, "concurrent clients for forward, connect and newtunnel")
		bodySize   = flag.Int("body", 1024, "small response body size, bytes")
		dlSize     = flag.String("download-size", "1GiB", "download size (bytes, or with KiB/MiB/GiB)")
		dlTimeout  = flag.Duration("download-timeout", 60*time.Second, "bound on one download")
		idleN      = flag.Int("idle-tunnels", 5000, "idle tunnels for the memory scenario")
		idleSettle = flag.Duration("idle-settle", 2*time.Second, "wait after opening the idle tunnels before reading RSS")
		maxReqs    = flag.Int64("max-requests", 5_000_000, "bound on requests per run")
		scenarios  = flag.String("scenarios", strings.Join(defaultScenarios, ","), "comma-separated scenarios to run (have "+strings.Join(scenarioNames, ",")+")")
		levels     = flag.String("log-levels", "warn,info", "gateway log levels to run the request scenarios at (info: stderr to /dev/null)")
		gwCPU      = flag.Int("gateway-cpu", 0, "CPU the gateway is pinned to")
		benchCPU   = flag.Int("bench-cpu", 1, "CPU this process (load generator + upstream) is pinned to")
		noPin      = flag.Bool("no-pin", false, "do not pin anything (ratios then mean little)")
		maxOther   = flag.Float64("max-other", 0.10, "retry a direct/proxied pair when other processes took more than this fraction of a pinned core")
		retries    = flag.Int("retries", 2, "retries of a contaminated pair (see -max-other); the least contaminated attempt is kept")
		nice       = flag.Int("nice", 0, "nice value for this process and the gateway (e.g. -10 on a shared machine; negative needs CAP_SYS_NICE)")
		jsonOut    = flag.Bool("json", false, "print the results as JSON on stdout (the table goes to stderr)")
		soakOps    = flag.Int("soak-ops", 10_000, "soak: operations per run (each run: without, then with reloads)")
		soakWarmup = flag.Int("soak-warmup-ops", 600, "soak: unmeasured operations before the memory baseline")
		soakReload = flag.Duration("soak-reload", time.Second, "soak: interval of config rewrite + POST /v1/reload in the reloading run")
		soakSettle = flag.Duration("soak-settle", 5*time.Second, "soak: idle wait after the last run before the settled memory reading")
		soakBound  = flag.Duration("soak-timeout", 3*time.Minute, "soak: bound on one run")
		soakMix    = flag.String("soak-mix", "1:1:1", "soak: weights of plain tunnel : injected request : denied CONNECT")
		soakLimit  = flag.Int("soak-limit", 0, "soak: limits.max_connections_per_client; 0: the client count (-c), i.e. run at the limit")
		leafHosts  = flag.Int("leaf-hosts", 1024, "mitm: new hosts per round of the leaf-cache memory figure (2 rounds)")
		leafTimed  = flag.Int("leaf-timed", 100, "mitm: hosts timed first connection (leaf minted) vs second (cached)")
		dnsQueries = flag.Int("dns-queries", 2000, "transparent: DNS queries from inside the sandbox for the cached-answer figure")
	)
	flag.Parse()
	maxOtherLoad = *maxOther
	want := map[string]bool{}
	for _, s := range strings.Split(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !contains(scenarioNames, s) {
			return fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(scenarioNames, ","))
		}
		want[s] = true
	}
	size, err := parseSize(*dlSize)
	if err != nil {
		return fmt.Errorf("-download-size: %w", err)
	}
	progress := os.Stderr

	dir, err := os.MkdirTemp("", "hookgate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *gwBin == "" {
		fmt.Fprintln(progress, "building the gateway...")
		if *gwBin, err = buildGateway(dir); err != nil { // before pinning: the build gets both cores
			return err
		}
	}

	nofile, err := raiseNofile()
	if err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if want["idle"] && uint64(2**idleN+256) > nofile {
		return fmt.Errorf("-idle-tunnels %d needs about %d file descriptors per process, RLIMIT_NOFILE hard limit is %d", *idleN, 2**idleN+256, nofile)
	}
	pin := -1
	if !*noPin {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return err
		}
		if !set.IsSet(*gwCPU) || !set.IsSet(*benchCPU) || *gwCPU == *benchCPU {
			return fmt.Errorf("need two distinct usable CPUs %d and %d (have %d); or -no-pin", *gwCPU, *benchCPU, set.Count())
		}
		if err := pinSelf(*benchCPU); err != nil {
			return err
		}
		pin = *gwCPU
		pinnedCPUs = [2]int{*gwCPU, *benchCPU}
	}
	if *nice != 0 {
		// Every thread of ours; the gateway inherits it from the thread that
		// forks it.
		if err := setNice(os.Getpid(), *nice); err != nil {
			return err
		}
	}

	u, err := startUpstream(*bodySize)
	if err != nil {
		return err
	}
	defer u.close()
	allow := []string{u.httpAddr.String(), u.tlsAddr.String()}
	lc := loadConfig{clients: *clients, warmup: *warmup, duration: *duration, maxReqs: *maxReqs, maxSamples: 200_000}

	meta := map[string]any{
		"gateway_binary": *gwBin, "go": runtime.Version(), "clients": *clients,
		"duration_s": duration.Seconds(), "warmup_s": warmup.Seconds(), "body_bytes": *bodySize,
		"download_bytes": size, "idle_tunnels": *idleN, "rlimit_nofile": nofile,
		"bench_gomaxprocs": runtime.GOMAXPROCS(0), "bench_cpus": allowedCPUs(os.Getpid()), "nice": *nice,
	}
	var rows []row
	fmt.Fprintf(progress, "bench pid %d on CPU(s) %s, GOMAXPROCS=%d, RLIMIT_NOFILE=%d; upstream http %s tls %s\n",
		os.Getpid(), meta["bench_cpus"], runtime.GOMAXPROCS(0), nofile, u.httpAddr, u.tlsAddr)

	perLevel := want["forward"] || want["connect"] || want["newtunnel"] || want["download"]
	for li, level := range strings.Split(*levels, ",") {
		level = strings.TrimSpace(level)
		if level == "" || !perLevel {
			continue
		}
		g, err := startGateway(gatewayOptions{bin: *gwBin, dir: dir, level: level, logFile: level != "info",
			allow: allow, cpu: pin, logLabel: level})
		if err != nil {
			return err
		}
		meta["gateway_cpus_"+level] = g.cpus
		logDesc := level
		if level == "info" {
			logDesc = "info>/dev/null"
		}
		fmt.Fprintf(progress, "gateway pid %d on CPU(s) %s, %s, log %s\n", g.pid, g.cpus, g.addr, logDesc)
		direct := target{u: u}
		prox := target{gw: g.addr, gwPID: g.pid, u: u}
		type reqScenario struct {
			name   string
			target float64
			f      func(target, loadConfig) measurement
		}
		for _, sc := range []reqScenario{
			{"forward", 0.60, forwardKeepAlive},
			{"connect", 0.85, connectKeepAlive},
			{"newtunnel", 0.90, newTunnelPerRequest},
		} {
			if !want[sc.name] {
				continue
			}
			var dead error
			best := pairRetry(*retries, *maxOther, func(int) ([]row, float64) {
				fmt.Fprintf(progress, "  %-9s direct...", sc.name)
				d := sc.f(direct, lc)
				fmt.Fprintf(progress, " %.0f req/s; proxied...", d.RPS)
				p := sc.f(prox, lc)
				fmt.Fprintf(progress, " %.0f req/s (gateway %.0f%% CPU, other load %.0f%%)\n", p.RPS, 100*p.GatewayCPU, 100*foreignLoad(d, p))
				if dead = g.alive(); dead != nil {
					return nil, 0 // no more attempts
				}
				return []row{mkRow(sc.name, logDesc, "req/s", sc.target, d, p, d.RPS, p.RPS)}, foreignLoad(d, p)
			})
			if dead != nil {
				return dead
			}
			rows = append(rows, best...)
		}
		// The download is one decision line in all: run it at the first level only.
		if want["download"] && li == 0 {
			rows = append(rows, pairRetry(*retries, *maxOther, func(int) ([]row, float64) {
				fmt.Fprintf(progress, "  download  %d bytes direct...", size)
				d := download(direct, size, *dlTimeout)
				fmt.Fprintf(progress, " %.0f MiB/s; proxied...", d.MiBps)
				p := download(prox, size, *dlTimeout)
				fmt.Fprintf(progress, " %.0f MiB/s (gateway %.0f%% CPU, other load %.0f%%)\n", p.MiBps, 100*p.GatewayCPU, 100*foreignLoad(d, p))
				return []row{mkRow("download", logDesc, "MiB/s", 0.97, d, p, d.MiBps, p.MiBps)}, foreignLoad(d, p)
			})...)
		}
		if g.stderr != "" {
			if fi, err := os.Stat(g.stderr); err == nil {
				meta["gateway_log_bytes_"+level] = fi.Size()
			}
		}
		g.stop()
	}

	if want["idle"] {
		// A fresh gateway, so that the heap it grew under load does not hide
		// what the tunnels cost.
		g, err := startGateway(gatewayOptions{bin: *gwBin, dir: dir, level: "warn", logFile: true,
			allow: allow, cpu: pin, logLabel: "idle"})
		if err != nil {
			return err
		}
		fmt.Fprintf(progress, "  idle      %d tunnels through a fresh gateway (pid %d)...", *idleN, g.pid)
		r := idleTunnels(g, u, *idleN, 64, *idleSettle, 2*time.Minute)
		fmt.Fprintf(progress, " %.1f KiB/tunnel\n", r.PerTunnelKiB)
		g.stop()
		rows = append(rows, row{Scenario: "idle", Log: "warn", Unit: "KiB/tunnel", Target: 16,
			Ratio: r.PerTunnelKiB, Pass: r.Opened == r.Tunnels && r.PerTunnelKiB <= 16, Idle: &r})
	}

	if want["soak"] {
		if *soakOps < 1 || *soakReload <= 0 {
			return fmt.Errorf("-soak-ops must be ≥ 1 and -soak-reload > 0")
		}
		mix, err := parseMix(*soakMix)
		if err != nil {
			return fmt.Errorf("-soak-mix: %w", err)
		}
		limit := *soakLimit
		if limit <= 0 {
			limit = *clients
		}
		res, q, r := soak(soakOptions{bin: *gwBin, dir: dir, cpu: pin, ops: *soakOps, clients: *clients, limit: limit, mix: mix,
			warmupOps: *soakWarmup, reloadEvery: *soakReload, settle: *soakSettle, runTimeout: *soakBound,
			opTimeout: 10 * time.Second, retries: *retries, maxOther: *maxOther, progress: progress})
		if res.FatalError != "" {
			fmt.Fprintf(progress, "  soak      FAILED: %s\n", res.FatalError)
		}
		meta["soak_ops_per_run"], meta["soak_reload_s"], meta["soak_settle_s"] = *soakOps, soakReload.Seconds(), soakSettle.Seconds()
		rows = append(rows, row{Scenario: "soak", Log: "info", Unit: "ops/s", Target: 2, Direct: q, Proxied: r,
			Ratio: res.P99Ratio, Pass: soakPass(res), Soak: &res, Attempts: res.Attempts})
	}

	if want["mitm"] || want["transparent"] {
		nu, err := startNamedUpstream(filepath.Join(dir, "named-upstream.pem"), *bodySize)
		if err != nil {
			return fmt.Errorf("mitm/transparent upstream: %w", err)
		}
		defer nu.close()
		nd, err := startNamedDNS()
		if err != nil {
			return fmt.Errorf("mitm/transparent DNS: %w", err)
		}
		defer nd.close()
		if want["mitm"] {
			rs, err := runMITM(mitmOptions{bin: *gwBin, dir: dir, cpu: pin, lc: lc, size: size, dlTimeout: *dlTimeout,
				retries: *retries, maxOther: *maxOther, leaves: *leafHosts, leafTimed: *leafTimed, up: nu, dns: nd, progress: progress})
			rows = append(rows, rs...)
			if err != nil {
				fmt.Fprintf(progress, "  mitm      FAILED: %v\n", err)
			}
		}
		if want["transparent"] {
			bench := -1
			if pin >= 0 {
				bench = *benchCPU
			}
			rs, err := runTransparent(tpOptions{bin: *gwBin, dir: dir, gwCPU: pin, benchCPU: bench, lc: lc, size: size,
				dlTimeout: *dlTimeout, retries: *retries, maxOther: *maxOther, dnsQueries: *dnsQueries, up: nu, dns: nd, progress: progress})
			rows = append(rows, rs...)
			if err != nil {
				fmt.Fprintf(progress, "  transparent FAILED: %v\n", err)
			}
		}
	}

	table := io.Writer(os.Stdout)
	if *jsonOut {
		table = os.Stderr
	}
	printTable(table, rows)
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report{Meta: meta, Rows: rows})
	}
	return nil
}

func mkRow(name, log, unit string, tgt float64, d, p measurement, dv, pv float64) row {
	r := row{Scenario: name, Log: log, Unit: unit, Target: tgt, Direct: d, Proxied: p}
	if dv > 0 {
		r.Ratio = pv / dv
	}
	r.Pass = r.Ratio >= tgt && d.Errors == 0 && p.Errors == 0
	return r
}

func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tlog\tdirect\tproxied\tunit\tratio\ttarget\t\tp50 d/p µs\tp99 d/p µs\tgw CPU\tbench CPU d/p\tother load d/p\terrors d/p\t")
	for _, r := range rows {
		if r.Idle != nil {
			i := r.Idle
			fmt.Fprintf(tw, "%s\t%s\t-\t%.1f\t%s\t-\t≤ %.0f\t%s\t%d→%d KiB RSS\t%d/%d open\t\t\t\t%d\t\n",
				r.Scenario, r.Log, i.PerTunnelKiB, r.Unit, r.Target, mark(r.Pass),
				i.RSSBeforeKiB, i.RSSAfterKiB, i.Opened, i.Tunnels, i.Errors)
			continue
		}
		if r.Soak != nil {
			printSoakRow(tw, r)
			continue
		}
		if r.Leaf != nil {
			printLeafRow(tw, r)
			continue
		}
		if r.DNS != nil {
			printDNSRow(tw, r)
			continue
		}
		tgt := fmt.Sprintf("≥ %.2f", r.Target)
		if r.Target == 0 {
			tgt = "-" // reported, not judged
		}
		dv, pv := r.Direct.RPS, r.Proxied.RPS
		lat := fmt.Sprintf("%s/%s", us(r.Direct.P50us), us(r.Proxied.P50us))
		lat99 := fmt.Sprintf("%s/%s", us(r.Direct.P99us), us(r.Proxied.P99us))
		if r.Unit == "MiB/s" {
			dv, pv = r.Direct.MiBps, r.Proxied.MiBps
			lat = fmt.Sprintf("%.2fs/%.2fs", r.Direct.Seconds, r.Proxied.Seconds)
			lat99 = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%.3f\t%s\t%s\t%s\t%s\t%.0f%%\t%.0f%%/%.0f%%\t%.0f%%/%.0f%%\t%d/%d\t\n",
			r.Scenario, r.Log, dv, pv, r.Unit, r.Ratio, tgt, mark(r.Pass)+noisy(r), lat, lat99,
			100*r.Proxied.GatewayCPU, 100*r.Direct.BenchCPU, 100*r.Proxied.BenchCPU,
			100*r.Direct.OtherOnBenchCPU, 100*max(r.Proxied.OtherOnGatewayCPU, r.Proxied.OtherOnBenchCPU),
			r.Direct.Errors, r.Proxied.Errors)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Soak != nil {
			printSoakDetails(w, r.Soak)
			continue
		}
		if r.Leaf != nil {
			printLeafDetails(w, r.Leaf)
		}
		if r.DNS != nil {
			printDNSDetails(w, r.DNS)
		}
		if r.Note != "" {
			fmt.Fprintln(w, r.Note)
		}
		for _, m := range []struct {
			side string
			m    measurement
		}{{"direct", r.Direct}, {"proxied", r.Proxied}} {
			if m.m.FirstError != "" {
				fmt.Fprintf(w, "%s/%s %s: first error: %s\n", r.Scenario, r.Log, m.side, m.m.FirstError)
			}
		}
		if r.Idle != nil && r.Idle.FirstError != "" {
			fmt.Fprintf(w, "idle: first error: %s\n", r.Idle.FirstError)
		}
	}
}

// maxOtherLoad is -max-other, for the table's "?" marks.
var maxOtherLoad = 0.10

// noisy marks a row whose kept attempt was still contaminated by other load.
func noisy(r row) string {
	if foreignLoad(r.Direct, r.Proxied) > maxOtherLoad {
		return "?"
	}
	return ""
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func us(v float64) string {
	if v >= 10000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
