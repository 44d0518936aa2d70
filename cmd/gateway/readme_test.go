package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the lines of the first ```sh block after marker in
// README.md.
func readmeBlock(t *testing.T, marker string) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), marker)
	if !ok {
		t.Fatalf("README.md has no %q", marker)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("README.md: no sh block after %q", marker)
	}
	block, _, _ = strings.Cut(block, "```")
	return strings.Split(strings.TrimSpace(block), "\n")
}

// readmeCommand splits a README line "VAR=x go run ./cmd/gateway ARGS > FILE
// # comment" into its environment, the gateway's arguments and the file
// stdout goes to; ok is false for lines that do not run the gateway.
func readmeCommand(line string) (env map[string]string, args []string, stdoutFile string, ok bool) {
	line, _, _ = strings.Cut(line, "#")
	fields := strings.Fields(line)
	env = map[string]string{}
	for len(fields) > 0 && strings.Contains(fields[0], "=") {
		k, v, _ := strings.Cut(fields[0], "=")
		env[k], fields = v, fields[1:]
	}
	if len(fields) < 3 || fields[0] != "go" || fields[1] != "run" || fields[2] != "./cmd/gateway" {
		return nil, nil, "", false
	}
	args = fields[3:]
	for i, a := range args {
		if a == ">" && i+1 < len(args) {
			return env, args[:i], args[i+1], true
		}
	}
	return env, args, "", true
}

// TestREADMECASetup runs the README's credential-injection set-up, as
// written, in a fresh copy of the repository's layout (configs/telemetry.yaml
// and nothing else), as a new user would from the repository root. serve
// gets ephemeral ports added (3128 and 9090 may be taken here) and is
// stopped once it listens.
func TestREADMECASetup(t *testing.T) {
	root := t.TempDir()
	tel, err := os.ReadFile("../../configs/telemetry.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "configs", "telemetry.yaml"), string(tel))
	lines := readmeBlock(t, "Setting it up")
	t.Chdir(root)

	var ran []string
	for _, line := range lines {
		env, args, stdoutFile, ok := readmeCommand(line)
		if !ok {
			continue
		}
		for _, a := range args {
			if filepath.IsAbs(a) {
				t.Fatalf("README line %q names %s: the set-up must work inside the repository, and this test runs nothing outside its own directory", line, a)
			}
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		ran = append(ran, args[0])
		if args[0] == "serve" {
			serveUntilListening(t, append(args, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"))
			continue
		}
		out, errOut, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("README line %q: exit %d\n%s%s", line, code, out, errOut)
		}
		if stdoutFile != "" {
			writeFile(t, stdoutFile, out)
		}
	}
	if got := strings.Join(ran, " "); got != "ca ca check serve" {
		t.Fatalf("README set-up runs %q; this test expects ca init, ca cert, check, serve", got)
	}
	// The certificate handed to the sandbox is the CA that serve loaded.
	data, err := os.ReadFile("hookgate-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("hookgate-ca.pem is not PEM:\n%s", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !cert.IsCA {
		t.Fatalf("hookgate-ca.pem: %v (CA: %v)", err, cert != nil && cert.IsCA)
	}
}

// serveUntilListening runs serve in-process until it listens, then stops
// it; serve must then exit 0.
func serveUntilListening(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(t, ctx, args)
	if addr == "" {
		t.Fatalf("serve %q did not start: %v", args, <-done)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve %q: %v", args, err)
	}
}

// startServe runs serve in-process and returns its proxy address once it
// listens, or "" when serve ended first (its error is then on done).
func startServe(t *testing.T, ctx context.Context, args []string) (string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, strings.NewReader(""), io.Discard, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct{ Message, Proxy string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "gateway listening" {
				found <- line.Proxy
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		close(found)
	}()
	select {
	case addr := <-found:
		return addr, done
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start listening")
		return "", done
	}
}

// TestREADMEProxyVariablesReachCurl: the quick start's proxy variables are
// ones curl honours for http:// URLs (it ignores upper-case HTTP_PROXY): a
// request to a loopback address through them is refused by the gateway
// (403 blocked-by-address-policy); had curl gone direct, it would have been
// refused by the closed port instead.
func TestREADMEProxyVariablesReachCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but curl is missing")
		}
		t.Skip("no curl")
	}
	var exports []string
	for _, l := range readmeBlock(t, "Then point a client at") {
		if rest, ok := strings.CutPrefix(l, "export "); ok {
			exports = strings.Fields(rest)
		}
	}
	if len(exports) == 0 {
		t.Fatal("the README's quick start exports no proxy variables")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, done := startServe(t, ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"})
	if addr == "" {
		t.Fatalf("serve did not start: %v", <-done)
	}
	defer func() { cancel(); <-done }()

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for _, e := range exports {
		env = append(env, strings.ReplaceAll(e, "127.0.0.1:3128", addr))
	}
	// Port 9 (discard) on loopback: nothing listens there in a test host.
	cmd := exec.CommandContext(ctx, curl, "-sS", "-i", "--max-time", "10", "http://127.0.0.1:9/latest/meta-data/")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 403 ") || !strings.Contains(string(out), "X-Proxy-Error: blocked-by-address-policy") {
		t.Fatalf("curl with the README's variables %q: %v\n%s", exports, err, out)
	}
}
