//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The token-injection figures: MITM with injection
// against a direct TLS connection to the same upstream, keep-alive and a new
// connection per request (cached leaf); 1 GiB downloads through an opaque
// tunnel, through MITM with a literal transform (no secret, so no scrubber)
// and through MITM with an ${env:} transform (a secret: the scrubber is on);
// the leaf-generation cost and the leaf cache's memory. See bench/README.md
// ("mitm").

type mitmOptions struct {
	bin       string
	dir       string
	cpu       int // gateway core; -1: not pinned
	lc        loadConfig
	size      int64
	dlTimeout time.Duration
	retries   int
	maxOther  float64
	leaves    int // new hosts for the leaf memory figure (2 rounds of this many)
	leafTimed int // hosts timed first vs cached
	up        *namedUpstream
	dns       *loopbackDNS
	progress  io.Writer
}

// leafResult is the leaf-generation figure.
type leafResult struct {
	Timed        int      `json:"timed_hosts"`
	FirstP50us   float64  `json:"first_conn_p50_us"` // CONNECT + TLS (leaf minted) + GET + close
	FirstP90us   float64  `json:"first_conn_p90_us"`
	CachedP50us  float64  `json:"cached_conn_p50_us"` // the same host again: leaf from the cache
	CachedP90us  float64  `json:"cached_conn_p90_us"`
	LeafCostUs   float64  `json:"leaf_cost_us"`       // first p50 − cached p50
	MintInProcUs float64  `json:"mint_in_process_us"` // keygen + sign + parse, as ca.mint does, on the bench core (p50)
	Hosts        int      `json:"hosts_per_round"`    // new hosts per memory round
	RSS          [3]int64 `json:"rss_kib"`            // before, after round 1 (cache filling), after round 2 (evicting)
	Heap         [3]int64 `json:"heap_inuse_kib"`     // the same, go_memstats_heap_inuse_bytes
	PerLeafKiB   float64  `json:"rss_per_leaf_kib"`   // round 1 RSS growth / hosts
	HeapLeafKiB  float64  `json:"heap_per_leaf_kib"`  // round 1 heap growth / hosts
	Errors       int      `json:"errors"`
	FirstError   string   `json:"first_error,omitempty"`
}

func runMITM(o mitmOptions) ([]row, error) {
	mdir := filepath.Join(o.dir, "mitm")
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		return nil, err
	}
	caDir := filepath.Join(mdir, "ca")
	if out, err := exec.Command(o.bin, "ca", "init", "--dir", caDir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gateway ca init: %v: %s", err, bytes.TrimSpace(out))
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	gwPool := x509.NewCertPool()
	if !gwPool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in the gateway's ca.pem")
	}
	var tok [24]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("# written by bench (mitm)\n")
	b.WriteString("listen: {proxy: \"PROXY\", admin: \"ADMIN\"}\n") // free ports, filled in by startMITMGateway
	b.WriteString("network:\n  allowlist:\n")
	fmt.Fprintf(&b, "    - domain: %s\n      transform: {Authorization: \"Bearer ${env:%s}\"}\n", mitmEnvHost, soakTokenEnv)
	fmt.Fprintf(&b, "    - domain: %s\n      transform: {Authorization: %q}\n", mitmLitHost, mitmLiteral)
	fmt.Fprintf(&b, "    - domain: \"*%s\"\n      transform: {Authorization: \"Bearer ${env:%s}\"}\n", leafSuffix, soakTokenEnv)
	fmt.Fprintf(&b, "    - domain: \"127.0.0.1\"\n      transform: {Authorization: \"Bearer ${env:%s}\"}\n", soakTokenEnv)
	fmt.Fprintf(&b, "    - domain: %s\n", mitmPlainHost)
	fmt.Fprintf(&b, "  dns: {servers: [%q]}\n", o.dns.addr)
	fmt.Fprintf(&b, "upstream: {ca_file: %q}\n", o.up.pemPath)
	fmt.Fprintf(&b, "ca: {cert_file: %q, key_file: %q}\n", filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "ca-key.pem"))
	b.WriteString("limits: {max_connections: 0, max_connections_per_client: 0}\n")
	b.WriteString("log: {level: warn}\n")
	env := append(os.Environ(), soakTokenEnv+"="+fmt.Sprintf("%x", tok))
	g, proxyAddr, admin, err := startMITMGateway(o, mdir, b.String(), env)
	if err != nil {
		return nil, fmt.Errorf("mitm gateway: %w", err)
	}
	defer g.stop()
	fmt.Fprintf(o.progress, "mitm gateway pid %d on CPU(s) %s, proxy %s, admin %s, log warn\n", g.pid, g.cpus, proxyAddr, admin)

	port := strconv.Itoa(int(o.up.addr.Port()))
	direct := func(sni string) hostTarget {
		return hostTarget{addr: o.up.addr.String(), tls: tlsFor(o.up.pool, sni)}
	}
	via := func(host string, pool *x509.CertPool) hostTarget {
		return hostTarget{gw: proxyAddr, gwPID: g.pid, addr: host + ":" + port, tls: tlsFor(pool, host)}
	}
	envT, litT, plainT, ipT := via(mitmEnvHost, gwPool), via(mitmLitHost, gwPool), via(mitmPlainHost, o.up.pool), via("127.0.0.1", gwPool)
	// Warm every path once (and check it works) before measuring.
	for _, t := range []hostTarget{envT, litT, plainT, ipT} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tc, err := dialTLS(ctx, t.gw, t.addr, t.tls)
		if err == nil {
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = newConn(tc, getRequest(t.addr, "/small", false)).roundTrip()
			tc.Close()
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("mitm: warm-up through %s: %w%s", t.addr, err, g.logTail())
		}
	}

	var rows []row
	type pair struct {
		name   string
		target float64
		d, p   hostTarget
		f      func(hostTarget, loadConfig) measurement
		note   string
	}
	for _, pc := range []pair{
		{"mitm-keepalive", 0.50, direct(mitmEnvHost), envT, tlsKeepAliveLoad, ""},
		// The same with a literal transform: no secret, no scrubber, the
		// response keeps its Content-Length (reported, not judged).
		{"mitm-keepalive-lit", 0, direct(mitmLitHost), litT, tlsKeepAliveLoad, ""},
		{"mitm-newconn", 0.50, direct(mitmEnvHost), envT, tlsNewConnLoad, "name"},
		{"mitm-newconn-ip", 0.50, direct("127.0.0.1"), ipT, tlsNewConnLoad, ""},
	} {
		rows = append(rows, pairRetry(o.retries, o.maxOther, func(int) ([]row, float64) {
			fmt.Fprintf(o.progress, "  %-18s direct...", pc.name)
			d := pc.f(pc.d, o.lc)
			fmt.Fprintf(o.progress, " %.0f req/s; proxied...", d.RPS)
			q0 := o.dns.queries.Load()
			p := pc.f(pc.p, o.lc)
			q := o.dns.queries.Load() - q0
			fmt.Fprintf(o.progress, " %.0f req/s (gateway %.0f%% CPU, other load %.0f%%)\n", p.RPS, 100*p.GatewayCPU, 100*foreignLoad(d, p))
			r := mkRow(pc.name, "warn", "req/s", pc.target, d, p, d.RPS, p.RPS)
			if pc.note == "name" && p.Requests > 0 {
				r.Note = fmt.Sprintf("the gateway resolved %s for every CONNECT: %d upstream DNS queries (%.1f per request, answered on the bench core; warm-up included)", mitmEnvHost, q, float64(q)/float64(p.Requests))
			}
			return []row{r}, foreignLoad(d, p)
		})...)
		if err := g.alive(); err != nil {
			return rows, err
		}
	}

	// Downloads: direct, opaque tunnel, MITM literal (no scrubber), MITM
	// ${env:} (scrubber), back to back; retried together.
	rows = append(rows, pairRetry(o.retries, o.maxOther, func(int) ([]row, float64) {
		fmt.Fprintf(o.progress, "  downloads %d bytes: direct...", o.size)
		d := tlsDownload(direct(mitmEnvHost), o.size, o.dlTimeout)
		fmt.Fprintf(o.progress, " %.0f MiB/s; tunnel...", d.MiBps)
		t := tlsDownload(plainT, o.size, o.dlTimeout)
		fmt.Fprintf(o.progress, " %.0f; mitm literal...", t.MiBps)
		l := tlsDownload(litT, o.size, o.dlTimeout)
		fmt.Fprintf(o.progress, " %.0f; mitm ${env:} (scrubbed)...", l.MiBps)
		e := tlsDownload(envT, o.size, o.dlTimeout)
		other := max(foreignLoad(d, t), foreignLoad(d, l), foreignLoad(d, e))
		fmt.Fprintf(o.progress, " %.0f MiB/s (gateway %.0f%%/%.0f%%/%.0f%% CPU, other load %.0f%%)\n", e.MiBps, 100*t.GatewayCPU, 100*l.GatewayCPU, 100*e.GatewayCPU, 100*other)
		rs := []row{
			mkRow("mitm-dl-tunnel", "warn", "MiB/s", 0, d, t, d.MiBps, t.MiBps),
			mkRow("mitm-dl-literal", "warn", "MiB/s", 0, d, l, d.MiBps, l.MiBps),
			mkRow("mitm-dl-scrubbed", "warn", "MiB/s", 0, d, e, d.MiBps, e.MiBps),
			mkRow("mitm-scrub", "warn", "MiB/s", 0.97, l, e, l.MiBps, e.MiBps),
		}
		rs[3].Note = "mitm-scrub: \"direct\" is MITM with a literal transform (no secret, no scrubber), \"proxied\" the same with ${env:} (scrubber on): ratio ≥ 0.97 ⇔ scrubbing costs ≤ 3%"
		return rs, other
	})...)
	if err := g.alive(); err != nil {
		return rows, err
	}

	fmt.Fprintf(o.progress, "  leaf      %d hosts first vs cached, then 2×%d new hosts for memory...", o.leafTimed, o.leaves)
	lr := leafFigure(o, &soakEnv{g: g, admin: admin, httpc: &http.Client{Timeout: 5 * time.Second}}, proxyAddr, port, gwPool)
	fmt.Fprintf(o.progress, " leaf %.0f µs, %.1f KiB/leaf RSS\n", lr.LeafCostUs, lr.PerLeafKiB)
	rows = append(rows, row{Scenario: "mitm-leaf", Log: "warn", Unit: "µs", Pass: lr.Errors == 0, Ratio: lr.LeafCostUs, Leaf: &lr})
	return rows, g.alive()
}

// leafFigure: sequential connections (one client) through the MITM to
// names under *.leaf.bench.test. For o.leafTimed names, a first connection
// (the gateway mints a leaf) and a second (cached); then two rounds of
// o.leaves new names with the gateway's RSS and heap before and after each.
func leafFigure(o mitmOptions, e *soakEnv, proxyAddr, port string, pool *x509.CertPool) leafResult {
	r := leafResult{Timed: o.leafTimed, Hosts: o.leaves}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	next := 0
	one := func(host string) (time.Duration, error) {
		t0 := time.Now()
		hp := host + ":" + port
		tc, err := dialTLS(ctx, proxyAddr, hp, tlsFor(pool, host))
		if err != nil {
			return 0, err
		}
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := newConn(tc, getRequest(hp, "/small", false)).roundTrip(); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	fail := func(err error) {
		r.Errors++
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
	}
	newHost := func() string { next++; return "h" + strconv.Itoa(next) + leafSuffix }
	var first, cached []time.Duration
	for i := 0; i < o.leafTimed && ctx.Err() == nil; i++ {
		h := newHost()
		d1, err := one(h)
		if err != nil {
			fail(err)
			continue
		}
		d2, err := one(h)
		if err != nil {
			fail(err)
			continue
		}
		first, cached = append(first, d1), append(cached, d2)
	}
	r.FirstP50us, r.FirstP90us = percentileUS(first, 0.5), percentileUS(first, 0.9)
	r.CachedP50us, r.CachedP90us = percentileUS(cached, 0.5), percentileUS(cached, 0.9)
	r.LeafCostUs = r.FirstP50us - r.CachedP50us
	r.MintInProcUs = mintInProcess(200)

	read := func(i int) {
		time.Sleep(500 * time.Millisecond)
		m := e.mem()
		r.RSS[i], r.Heap[i] = m.RSSKiB, m.HeapInuseKiB
	}
	read(0)
	for round := 1; round <= 2; round++ {
		for i := 0; i < o.leaves && ctx.Err() == nil; i++ {
			if _, err := one(newHost()); err != nil {
				fail(err)
			}
		}
		read(round)
	}
	if o.leaves > 0 {
		r.PerLeafKiB = float64(r.RSS[1]-r.RSS[0]) / float64(o.leaves)
		r.HeapLeafKiB = float64(r.Heap[1]-r.Heap[0]) / float64(o.leaves)
	}
	return r
}

// mintInProcess is the p50 of what ca.mint does (P-256 key, certificate
// signed by a P-256 CA, parsed), n times on the bench core: a cross-check of
// the leaf cost seen through the gateway.
func mintInProcess(n int) float64 {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return 0
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return 0
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return 0
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "x.leaf.bench.test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"x.leaf.bench.test"},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return 0
		}
		if _, err := x509.ParseCertificate(der); err != nil {
			return 0
		}
		ds = append(ds, time.Since(t0))
	}
	return percentileUS(ds, 0.5)
}

// printLeafRow is the leaf figure's line in the table.
func printLeafRow(w io.Writer, r row) {
	l := r.Leaf
	fmt.Fprintf(w, "%s\t%s\t-\t%.0f\t%s\t-\t-\t%s\tfirst %s/cached %s\tp90 %s/%s\t\t\t\t%d\t\n",
		r.Scenario, r.Log, l.LeafCostUs, r.Unit, mark(r.Pass), us(l.FirstP50us), us(l.CachedP50us), us(l.FirstP90us), us(l.CachedP90us), l.Errors)
}

func printLeafDetails(w io.Writer, l *leafResult) {
	fmt.Fprintf(w, "mitm-leaf: %d new hosts, first connection (CONNECT + DNS + TLS with a freshly minted leaf + GET + close) p50 %s vs the same host again (cached leaf) %s: a leaf costs ≈ %.0f µs of latency; minting in-process (P-256 key + sign + parse, bench core) p50 %.0f µs\n",
		l.Timed, lat(l.FirstP50us), lat(l.CachedP50us), l.LeafCostUs, l.MintInProcUs)
	fmt.Fprintf(w, "mitm-leaf: memory, before → %d new hosts → %d more (cache full, evicting): RSS %d → %d → %d KiB, heap in use %d → %d → %d KiB; ≈ %.1f KiB RSS (%.1f KiB heap) per cached leaf, so the 1024-leaf cache is bounded at ≈ %.1f MiB\n",
		l.Hosts, l.Hosts, l.RSS[0], l.RSS[1], l.RSS[2], l.Heap[0], l.Heap[1], l.Heap[2], l.PerLeafKiB, l.HeapLeafKiB, max(l.PerLeafKiB, l.HeapLeafKiB)) // KiB per leaf × 1024 leaves / 1024 = MiB
	if l.FirstError != "" {
		fmt.Fprintf(w, "mitm-leaf: %d errors, first: %s\n", l.Errors, l.FirstError)
	}
}

// startMITMGateway starts `gateway serve` pinned like the other scenarios,
// at log level warn (so there is no "gateway listening" line to read the
// addresses from): the config gets two free ports for proxy and admin, and
// the proxy port is polled until it accepts.
func startMITMGateway(o mitmOptions, dir, cfgTemplate string, env []string) (*gateway, string, string, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // freePort can race another process
		proxyAddr, err := freePort()
		if err != nil {
			return nil, "", "", err
		}
		admin, err := freePort()
		if err != nil {
			return nil, "", "", err
		}
		cfgPath := filepath.Join(dir, "gateway-mitm.yaml")
		cfg := strings.NewReplacer("PROXY", proxyAddr, "ADMIN", admin).Replace(cfgTemplate)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, "", "", err
		}
		logPath := filepath.Join(dir, "gateway-mitm.log")
		f, err := os.Create(logPath)
		if err != nil {
			return nil, "", "", err
		}
		cmd := exec.Command(o.bin, "serve", "--config", cfgPath, "--test-allow-upstream", o.up.addr.String())
		cmd.Env, cmd.Stderr = env, f
		g := &gateway{cmd: cmd, addr: proxyAddr, done: make(chan struct{}), stderr: logPath}
		err = g.launch(o.cpu)
		f.Close()
		if err != nil {
			return nil, "", "", err
		}
		lastErr = waitListening(g, proxyAddr, admin)
		if lastErr == nil {
			g.listening(o.cpu)
			return g, proxyAddr, admin, nil
		}
		g.stop()
	}
	return nil, "", "", lastErr
}

// waitListening polls addrs until each accepts, for at most 10s.
func waitListening(g *gateway, addrs ...string) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range addrs {
		for {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if err := g.alive(); err != nil {
				return fmt.Errorf("gateway exited at start: %w", err)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("gateway not listening on %s after 10s: %v%s", a, err, g.logTail())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
