package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/sandbox"
)

// TestMain lets the test binary act as the gateway binary itself, so the
// signal test exercises the real main, and so does the sandbox's init
// (sandbox exec re-executes /proc/self/exe, this binary in tests).
func TestMain(m *testing.M) {
	if os.Getenv("HOOKGATE_TEST_RUN_MAIN") == "1" || sandbox.IsInit(os.Args[1:]) {
		main()
		return
	}
	os.Exit(m.Run())
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	code = exitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

func TestHelpAndVersion(t *testing.T) {
	out, _, code := runCLI(t, "--help")
	if code != 0 || !strings.Contains(out, "serve") || !strings.Contains(out, "check") {
		t.Fatalf("--help: code %d, out %q", code, out)
	}
	for _, cmd := range []string{"serve", "check", "version"} {
		out, _, code := runCLI(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "usage: gateway "+cmd) {
			t.Errorf("%s --help: code %d, out %q", cmd, code, out)
		}
	}
	out, _, code = runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "hookgate ") {
		t.Fatalf("version: %d %q", code, out)
	}
	_, errOut, code := runCLI(t, "nonsense")
	if code != 2 || !strings.Contains(errOut, `unknown command "nonsense"`) {
		t.Fatalf("unknown command: %d %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "serve", "--bogus")
	if code != 2 || !strings.Contains(errOut, "bogus") {
		t.Fatalf("bad flag: %d %q", code, errOut)
	}
}

func TestCheck(t *testing.T) {
	out, _, code := runCLI(t, "check", "--config", "../../configs/gateway.yaml")
	if code != 0 || !strings.Contains(out, "OK") || !strings.Contains(out, "* (any)") {
		t.Fatalf("check default: %d %q", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("network:\n  allowlist:\n    - domain: https://api.x.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "check", "--config", bad)
	want := bad + `:3: network.allowlist[0].domain: a domain, not a URL; use "api.x.com"`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("check bad: code %d, stderr %q, want %q", code, errOut, want)
	}
	_, _, code = runCLI(t, "check")
	if code != 2 {
		t.Fatalf("check without --config: code %d", code)
	}
}

// listeningAddr waits (bounded) for the "gateway listening" line on r and
// returns the proxy address it names.
func listeningAddr(t *testing.T, r io.Reader) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var line struct{ Message, Proxy string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "gateway listening" {
				found <- line.Proxy
				break
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case a := <-found:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not start listening")
		return ""
	}
}

// TestServeDefaultConfigAndSignal runs the real main as a process on the
// built-in default, proxies one request, and stops it with SIGTERM: exit 0.
func TestServeDefaultConfigAndSignal(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "http://")

	cmd := exec.Command(os.Args[0], "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--test-allow-upstream", upAddr)
	cmd.Env = append(os.Environ(), "HOOKGATE_TEST_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	addr := listeningAddr(t, stderr)

	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	resp, err := client.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("exempt upstream: %d", resp.StatusCode)
	}
	// The default config blocks private addresses.
	resp, err = client.Get("http://10.0.0.1/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("private address on the default config: %d", resp.StatusCode)
	}
	client.CloseIdleConnections()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("gateway exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not exit after SIGTERM")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("listener still open after exit")
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--test-allow-upstream", "127.0.0.1"},
		{"serve", "--listen", "nonsense"},
		{"serve", "--config", "/does/not/exist.yaml"},
	} {
		err := run(context.Background(), args, nil, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%v: no error", args)
		}
		var ee *exitError
		if errors.As(err, &ee) && ee.code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
}
