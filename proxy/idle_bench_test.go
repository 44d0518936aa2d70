package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idleTunnels is how many tunnels BenchmarkIdleTunnelMemory holds open at
// once: enough that the per-tunnel figures are not lost in the noise of the
// rest of the heap, few enough for the default open-file limit.
const idleTunnels = 1000

// BenchmarkIdleTunnelMemory measures what an idle opaque tunnel costs the
// gateway: it opens idleTunnels CONNECT tunnels, sends a ClientHello and
// one small exchange each way through every one (so that both relay
// directions have copied bytes, as after a TLS handshake and a request),
// lets them go idle until the gateway has parked every relay direction
// (see parker), and reports per tunnel the live heap (net of the same
// connections held without the gateway), the goroutine stack bytes and the
// goroutines. The client and the upstream are driven from the benchmark
// goroutine itself, so that every goroutine and every stack counted is the
// gateway's.
func BenchmarkIdleTunnelMemory(b *testing.B) {
	gw, up, hello, target := tunnelGateway(b, gatewayConfig{})
	through := func(ex *idleExchange) error { return ex.openThrough(gw.addr, target) }
	direct := func(ex *idleExchange) error { return ex.openDirect(up.Addr().String()) }

	// Warm both paths (pools, the starting stack size, lazily built state)
	// before anything is counted. The runtime keeps the descriptors of
	// ended goroutines for new ones: after this they are reused, so the
	// heap figure leaves them out (about 0.5 KiB a goroutine; see
	// goroutines/tunnel).
	for i, open := range []func(*idleExchange) error{through, direct} {
		warm := holdIdle(b, up, hello, idleTunnels, open)
		if i == 0 {
			waitParked(b, gw.srv, 2*idleTunnels) // the parker, with its goroutine, is made
		}
		warm.close()
	}
	b.ResetTimer()
	var viaGateway, without idleCost
	parked := func() { waitParked(b, gw.srv, 2*idleTunnels) }
	for range b.N {
		viaGateway = measureIdle(b, up, hello, through, parked)
		without = measureIdle(b, up, hello, direct, func() {})
	}
	b.StopTimer()
	n := float64(idleTunnels)
	b.ReportMetric(float64(viaGateway.heap-without.heap)/n, "heap-B/tunnel")
	b.ReportMetric(float64(viaGateway.stacks-without.stacks)/n, "stack-B/tunnel")
	b.ReportMetric(float64(viaGateway.goroutines-without.goroutines)/n, "goroutines/tunnel")
	b.ReportMetric(0, "ns/op")
}

// idleCost is what holding idleTunnels connections added.
type idleCost struct{ heap, stacks, goroutines int64 }

// measureIdle holds idleTunnels connections opened by open and returns
// what they added to the live heap, the stacks and the goroutines once
// settled has returned (the gateway's tunnels parked).
func measureIdle(b *testing.B, up net.Listener, hello []byte, open func(*idleExchange) error, settled func()) idleCost {
	before := readIdleMetrics()
	held := holdIdle(b, up, hello, idleTunnels, open)
	settled()
	after := readIdleMetrics()
	held.close()
	// The gateway ends its tunnels on goroutines of its own: wait (bounded)
	// until they are gone, so that the next measurement starts level.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > int(before.goroutines); {
		if time.Now().After(deadline) {
			b.Fatalf("%d goroutines are still running, %d before the tunnels", runtime.NumGoroutine(), before.goroutines)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return idleCost{
		heap:       after.heap - before.heap,
		stacks:     after.stacks - before.stacks,
		goroutines: after.goroutines - before.goroutines,
	}
}

// readIdleMetrics settles the heap (two collections: the first may leave
// finalizer work and freed stacks behind) and reads the figures.
func readIdleMetrics() idleCost {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	return idleCost{heap: int64(s[0].Value.Uint64()), stacks: int64(s[1].Value.Uint64()), goroutines: int64(s[2].Value.Uint64())}
}

// heldConns are the benchmark's ends of open tunnels (or direct
// connections).
type heldConns []*idleExchange

func (h heldConns) close() {
	for _, ex := range h {
		ex.close()
	}
}

// holdIdle opens n connections with open, runs the exchange on each, and
// returns them once all are idle (the gateway's relays parked on reads).
func holdIdle(b *testing.B, up net.Listener, hello []byte, n int, open func(*idleExchange) error) heldConns {
	held := make(heldConns, 0, n)
	for range n {
		ex := &idleExchange{up: up, hello: hello}
		err := open(ex)
		if err == nil {
			err = ex.exchange()
		}
		if err != nil {
			ex.close()
			held.close()
			b.Fatal(err)
		}
		held = append(held, ex)
	}
	return held
}

// idleExchange is one connection through the gateway (or around it): the
// client's end and the upstream's, both held by the benchmark.
type idleExchange struct {
	up       net.Listener
	hello    []byte
	client   net.Conn
	upstream net.Conn
}

// openThrough opens a tunnel to target through the gateway at gwAddr and
// sends the ClientHello, which the gateway checks before it dials.
func (ex *idleExchange) openThrough(gwAddr, target string) error {
	c, err := net.DialTimeout("tcp", gwAddr, 5*time.Second)
	if err != nil {
		return err
	}
	ex.client = c
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return err
	}
	// Read the answer byte by byte, so that nothing of the tunnel is
	// buffered here.
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if len(head) > 1024 {
			return errors.New("the CONNECT answer has no end")
		}
		if _, err := c.Read(one); err != nil {
			return err
		}
		head = append(head, one[0])
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT answered %s", resp.Status)
	}
	return ex.accept()
}

// openDirect connects to the upstream without the gateway.
func (ex *idleExchange) openDirect(upAddr string) error {
	c, err := net.DialTimeout("tcp", upAddr, 5*time.Second)
	if err != nil {
		return err
	}
	ex.client = c
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return ex.accept()
}

// accept sends the ClientHello and takes the upstream's end.
func (ex *idleExchange) accept() error {
	if _, err := ex.client.Write(ex.hello); err != nil {
		return err
	}
	u, err := ex.up.Accept()
	if err != nil {
		return err
	}
	ex.upstream = u
	_ = u.SetDeadline(time.Now().Add(10 * time.Second))
	return nil
}

// exchange moves the ClientHello to the upstream, then an answer of 1 KiB
// back and a request of 100 bytes forth: about what a TLS handshake and one
// small GET move.
func (ex *idleExchange) exchange() error {
	if err := readN(ex.upstream, len(ex.hello)); err != nil {
		return fmt.Errorf("upstream reading the ClientHello: %w", err)
	}
	if _, err := ex.upstream.Write(make([]byte, 1024)); err != nil {
		return err
	}
	if err := readN(ex.client, 1024); err != nil {
		return fmt.Errorf("client reading the answer: %w", err)
	}
	if _, err := ex.client.Write(make([]byte, 100)); err != nil {
		return err
	}
	if err := readN(ex.upstream, 100); err != nil {
		return fmt.Errorf("upstream reading the request: %w", err)
	}
	return nil
}

func (ex *idleExchange) close() {
	if ex.client != nil {
		ex.client.Close()
	}
	if ex.upstream != nil {
		ex.upstream.Close()
	}
}

func readN(c net.Conn, n int) error {
	_, err := io.ReadFull(c, make([]byte, n))
	return err
}

// recordedClientHello returns the bytes of a real ClientHello naming
// serverName, as a TLS client writes them first.
func recordedClientHello(tb testing.TB, serverName string) []byte {
	tb.Helper()
	rec := &helloRecorder{}
	_ = tls.Client(rec, &tls.Config{ServerName: serverName}).Handshake()
	if rec.Len() == 0 {
		tb.Fatal("the TLS client wrote no ClientHello")
	}
	return rec.Bytes()
}

// helloRecorder is a connection that keeps what is written to it and has
// nothing to read: a TLS client's handshake on it writes its ClientHello
// and fails.
type helloRecorder struct {
	net.Conn
	bytes.Buffer
}

func (r *helloRecorder) Write(p []byte) (int, error) { return r.Buffer.Write(p) }
func (r *helloRecorder) Read([]byte) (int, error)    { return 0, io.EOF }
func (r *helloRecorder) Close() error                { return nil }

// BenchmarkParkWake measures what parking costs a tunnel that is idle for
// a while between exchanges: per op, one byte goes each way through a
// tunnel, which then stays quiet for a little longer than the park
// threshold. In "parks", both directions park in every pause and are woken
// by the next byte; in "never" parking is off and they wait on their
// goroutines. The difference of the two cpu-µs/op (the CPU time of all
// the process's threads, the benchmark's own work included in both) is
// what two parks and their wakes cost.
func BenchmarkParkWake(b *testing.B) {
	const threshold = 2 * time.Millisecond
	for _, bc := range []struct {
		name      string
		parkAfter time.Duration
	}{{"parks", threshold}, {"never", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			gw, up, hello, target := tunnelGateway(b, gatewayConfig{parkAfter: bc.parkAfter})
			ex := &idleExchange{up: up, hello: hello}
			defer ex.close()
			if err := ex.openThrough(gw.addr, target); err != nil {
				b.Fatal(err)
			}
			if err := ex.exchange(); err != nil {
				b.Fatal(err)
			}
			_ = ex.client.SetDeadline(time.Time{})
			_ = ex.upstream.SetDeadline(time.Time{})
			// The same pause either way; then both directions of a
			// parking tunnel are parked (waitParked finds them so at its
			// first look, barring a stalled machine).
			pause := func() {
				time.Sleep(3 * threshold)
				if bc.parkAfter > 0 {
					waitParked(b, gw.srv, 2)
				}
			}
			one := make([]byte, 1)
			pause()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range b.N {
				for _, hop := range [][2]net.Conn{{ex.client, ex.upstream}, {ex.upstream, ex.client}} {
					if _, err := hop[0].Write(one); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(hop[1], one); err != nil {
						b.Fatal(err)
					}
				}
				pause()
			}
			cpu := processCPU(b) - cpu0
			b.StopTimer()
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time the process's threads have run, to the
// nanosecond: the sum of their scheduler statistics (getrusage counts
// in clock ticks on many kernels, too coarse for this).
func processCPU(tb testing.TB) time.Duration {
	tasks, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		tb.Fatalf("no scheduler statistics: %v", err)
	}
	var total time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			tb.Fatalf("%s: %q", f, b)
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		total += time.Duration(ns)
	}
	return total
}
