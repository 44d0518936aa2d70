package policy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the policy embeddable: of hookgate's packages it uses only
// the file:line error type, so the hook runtime and any Go agent runtime
// can decide in process without the gateway or an HTTP stack of ours.
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
		"github.com/hookgate/hookgate/policy":          true,
		"github.com/hookgate/hookgate/internal/srcpos": true,
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/hookgate/hookgate/") && !allowed[p] || strings.HasPrefix(p, "github.com/elazarl/goproxy") ||
			strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("policy depends on %s", p)
		}
	}
}
