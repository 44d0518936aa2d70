package hooks

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the hook runtime apart from the gateway: of hookgate's
// packages it uses only its HTTP client and the file:line error type, so an
// agent runtime can embed it without the proxy.
func TestDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/hookgate/hookgate/hooks":           true,
		"github.com/hookgate/hookgate/hookhttp":        true,
		"github.com/hookgate/hookgate/internal/srcpos": true,
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/hookgate/hookgate/") && !allowed[p] || strings.HasPrefix(p, "github.com/elazarl/goproxy") {
			t.Errorf("hooks depends on %s", p)
		}
	}
}
