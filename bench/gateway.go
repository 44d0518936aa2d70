//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// gateway is one `gateway serve` child process, pinned to its own core.
type gateway struct {
	cmd    *exec.Cmd
	addr   string // the proxy listener, 127.0.0.1:PORT
	pid    int
	done   chan struct{}
	err    error
	cpus   string // Cpus_allowed_list over its threads, for the report
	stderr string // file the log went to ("" = /dev/null)
}

type gatewayOptions struct {
	bin      string
	dir      string // scratch directory for the config and the log
	level    string // log.level
	logFile  bool   // stderr to a file in dir (else /dev/null)
	allow    []string
	cpu      int // -1: do not pin
	logLabel string
}

// buildGateway compiles ./cmd/gateway of the module in the working directory.
func buildGateway(dir string) (string, error) {
	bin := filepath.Join(dir, "gateway")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/hookgate/hookgate/cmd/gateway")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the gateway (run from inside the module, or pass -gateway): %w", err)
	}
	return bin, nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startGateway(o gatewayOptions) (*gateway, error) {
	cfg := filepath.Join(o.dir, "gateway-"+o.logLabel+".yaml")
	yaml := "listen: {proxy: \"127.0.0.1:0\"}\n" +
		"network:\n  allowlist: [{domain: \"*\"}]\n  dns: {servers: []}\n" +
		// No connection limits: the idle scenario holds 5,000 tunnels from
		// one client address (the defaults are 4096 overall, 512 per client).
		"limits: {max_connections: 0, max_connections_per_client: 0}\n" +
		"log: {level: " + o.level + "}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	var g *gateway
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // freePort can race another process
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		g, lastErr = spawnGateway(o, cfg, addr)
		if lastErr == nil {
			return g, nil
		}
	}
	return nil, lastErr
}

func spawnGateway(o gatewayOptions, cfg, addr string) (*gateway, error) {
	args := []string{"serve", "--config", cfg, "--listen", addr}
	for _, a := range o.allow {
		args = append(args, "--test-allow-upstream", a)
	}
	cmd := exec.Command(o.bin, args...)
	cmd.Env = os.Environ()
	g := &gateway{cmd: cmd, addr: addr, done: make(chan struct{})}
	if o.logFile {
		g.stderr = filepath.Join(o.dir, "gateway-"+o.logLabel+".log")
		f, err := os.Create(g.stderr)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd.Stderr = f
	} // else nil: /dev/null
	if err := g.launch(o.cpu); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-g.done:
			return nil, fmt.Errorf("gateway exited at start: %v%s", g.err, g.logTail())
		default:
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("gateway not listening on %s after 10s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.listening(o.cpu)
	return g, nil
}

// launch starts g.cmd, pinned to cpu unless it is -1, and watches for its
// exit (g.done). If pinning fails, the gateway is stopped.
func (g *gateway) launch(cpu int) error {
	start := g.cmd.Start
	if cpu >= 0 {
		// Fork from a thread already pinned to the gateway's core: the child
		// and every thread it ever makes start there (and its Go runtime sizes
		// GOMAXPROCS to 1 from that mask, as a one-core deployment would).
		start = func() error { return withThreadAffinity(cpu, g.cmd.Start) }
	}
	if err := start(); err != nil {
		return err
	}
	g.pid = g.cmd.Process.Pid
	go func() { g.err = g.cmd.Wait(); close(g.done) }()
	if cpu >= 0 {
		// Belt and braces: the syscall on every thread of the child.
		if err := pinProcess(g.pid, cpu); err != nil {
			g.stop()
			return err
		}
	}
	return nil
}

// listening is for once the launched gateway listens: it pins again and
// records the cores for the report.
func (g *gateway) listening(cpu int) {
	if cpu >= 0 {
		_ = pinProcess(g.pid, cpu) // threads made while starting up
	}
	g.cpus = allowedCPUs(g.pid)
}

func (g *gateway) logTail() string {
	if g.stderr == "" {
		return ""
	}
	b, _ := os.ReadFile(g.stderr)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return "\n" + s
}

// stop sends SIGTERM and, if the gateway has not exited in 3s, SIGKILL.
func (g *gateway) stop() {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(3 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

func (g *gateway) alive() error {
	select {
	case <-g.done:
		if g.err == nil {
			g.err = errors.New("exited")
		}
		return fmt.Errorf("gateway died: %v%s", g.err, g.logTail())
	default:
		return nil
	}
}
