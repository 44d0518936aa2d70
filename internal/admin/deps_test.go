package admin

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps admin a leaf: it reaches the gateway only through the
// funcs in Options, so it imports no other hookgate package (in particular
// not proxy or config, which import much more) and no goproxy.
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
		if p == "github.com/hookgate/hookgate/internal/admin" {
			continue
		}
		if strings.HasPrefix(p, "github.com/hookgate/hookgate/") || strings.HasPrefix(p, "github.com/elazarl/goproxy") {
			t.Errorf("admin depends on %s", p)
		}
	}
}
