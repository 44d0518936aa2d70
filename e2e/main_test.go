package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Re-exec roles: the test binary runs itself, in another namespace, as one of
// these when roleEnv is set.
const (
	roleEnv      = "HOOKGATE_E2E_ROLE"
	roleUpstream = "upstream"

	// dirEnv names the directory shared by the test and its upstream role:
	// the certificate and key it serves, the record of what it got, and the
	// file that says it is ready.
	dirEnv = "HOOKGATE_E2E_DIR"
	// addrEnv is the address the upstream role listens on.
	addrEnv = "HOOKGATE_E2E_ADDR"
)

// buildTimeout bounds the one `go build` of the gateway.
const buildTimeout = 5 * time.Minute

var (
	// gatewayBin is the gateway binary built once by TestMain.
	gatewayBin string
	// gatewayBuildErr is why it could not be built; tests that need it fail.
	gatewayBuildErr error
)

func TestMain(m *testing.M) {
	if code, ok := sandboxClientMain(); ok {
		os.Exit(code)
	}
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	dir, err := os.MkdirTemp("", "hookgate-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	gatewayBin, gatewayBuildErr = buildGateway(dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	// Every process the tests started has been waited for, every client
	// connection closed: nothing of the tests may still be running.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runRole(role string) int {
	switch role {
	case roleUpstream:
		if err := runUpstream(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e upstream role:", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "e2e: unknown %s=%q\n", roleEnv, role)
		return 2
	}
}

// buildGateway builds cmd/gateway into dir, with -race when the tests have it.
func buildGateway(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		if root := os.Getenv("GOROOT"); root != "" {
			goTool = filepath.Join(root, "bin", "go")
		} else {
			return "", fmt.Errorf("building the gateway: no go command in PATH: %w", err)
		}
	}
	bin := filepath.Join(dir, "gateway")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/hookgate/hookgate/cmd/gateway")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (timed out after %v)", err, buildTimeout)
		}
		return "", fmt.Errorf("go %v: %v\n%s", args, err, out)
	}
	return bin, nil
}
