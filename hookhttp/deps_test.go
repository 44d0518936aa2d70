package hookhttp

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the dependency direction: hookhttp never imports the
// gateway's proxy (nor the hook runtime that uses it).
func TestDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/hookgate/hookgate/proxy", "github.com/hookgate/hookgate/hooks", "github.com/elazarl/goproxy":
			t.Errorf("hookhttp depends on %s", p)
		}
	}
}
