// Package hookgate_test states the module's architecture as tests: which
// package may depend on which, and that every package says what it holds.
package hookgate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/hookgate/hookgate"

// pkg is the part of `go list -json` these tests read.
type pkg struct {
	ImportPath string
	Doc        string
	GoFiles    []string
	Imports    []string // direct, of the non-test files
	Deps       []string // transitive, of the non-test files
}

// rel is p's path inside the module ("" for the root).
func (p pkg) rel() string {
	return strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
}

var listed = sync.OnceValues(func() ([]pkg, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(goBin, "list", "-json", "./...").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, errors.New(string(exit.Stderr))
		}
		return nil, err
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
})

func packages(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := listed()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return pkgs
}

// under reports whether the module-relative path rel is dir or inside it.
func under(rel string, dirs ...string) bool {
	for _, d := range dirs {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// layer places a package in the import direction
//
//	cmd → proxy, hooks, sandbox → config → allowlist, transform
//
// as 0 to 3; -1 for the packages beside it (ca, hookhttp, internal/...).
func layer(rel string) int {
	switch {
	case under(rel, "cmd"):
		return 0
	case under(rel, "proxy", "hooks", "sandbox", "dnsserver"):
		return 1
	case under(rel, "config"):
		return 2
	case under(rel, "allowlist", "transform"):
		return 3
	}
	return -1
}

// ours returns the module-relative paths of the hookgate packages in paths.
func ours(paths []string) []string {
	var rels []string
	for _, p := range paths {
		if p == module || strings.HasPrefix(p, module+"/") {
			rels = append(rels, strings.TrimPrefix(strings.TrimPrefix(p, module), "/"))
		}
	}
	return rels
}

// Dependencies point one way: a package never depends on one of a layer
// above it (config never on proxy, allowlist never on config, ...).
func TestImportDirection(t *testing.T) {
	for _, p := range packages(t) {
		from := layer(p.rel())
		if from < 0 {
			continue
		}
		for _, dep := range ours(p.Deps) {
			if to := layer(dep); to >= 0 && to < from {
				t.Errorf("%s depends on %s: imports point from cmd to proxy, hooks and sandbox, to config, to allowlist and transform", p.rel(), dep)
			}
		}
	}
}

// networkLibraries are the packages that open connections or speak a
// protocol on the wire.
var networkLibraries = []string{
	"net", "net/http", "net/http/httputil", "crypto/tls", "net/smtp", "net/rpc",
	"github.com/elazarl/goproxy", "github.com/miekg/dns", "github.com/hashicorp/go-retryablehttp",
	"golang.org/x/net/http2", "golang.org/x/net/proxy", "golang.org/x/net/http/httpproxy",
}

// The policy packages are pure: allowlist depends on no network library at
// all, and transform uses net/http for its header type only (it imports
// none of the others). Neither depends on another hookgate package.
func TestPolicyPackagesArePure(t *testing.T) {
	for _, p := range packages(t) {
		var reach []string
		switch p.rel() {
		case "allowlist":
			reach = p.Deps
		case "transform":
			reach = slices.DeleteFunc(slices.Clone(p.Imports), func(s string) bool { return s == "net/http" })
		default:
			continue
		}
		for _, lib := range networkLibraries {
			if slices.Contains(reach, lib) {
				t.Errorf("%s depends on the network library %s", p.rel(), lib)
			}
		}
		if deps := slices.DeleteFunc(ours(p.Deps), func(s string) bool { return s == p.rel() }); len(deps) > 0 {
			t.Errorf("%s depends on hookgate packages %v, want none", p.rel(), deps)
		}
	}
}

// The hook runtime, its HTTP client and the tool policy never reach the
// proxy: an agent runtime can embed them without the gateway. The policy
// decides with no HTTP stack of ours (its service adds one). The admin API
// reaches the gateway only through the funcs it is given.
func TestSideDependencies(t *testing.T) {
	allowed := map[string][]string{
		// hooks: itself and its subpackages, its HTTP client, the file:line
		// error, the trust-store helper, and the declarative policy its
		// policy handlers decide with (embeddable itself; its HTTP service,
		// policy/service, is not allowed).
		"hooks":          {"hooks", "hookhttp", "internal/srcpos", "internal/yamldoc", "internal/roots", "policy"},
		"hookhttp":       {"hookhttp", "internal/roots"},
		"policy":         {"policy", "internal/srcpos", "internal/yamldoc"},
		"policy/service": {"policy", "hookhttp", "internal/srcpos", "internal/yamldoc", "internal/roots"},
		"internal/admin": {"internal/admin"},
	}
	for _, p := range packages(t) {
		var want []string
		longest := ""
		for dir, ok := range allowed {
			if under(p.rel(), dir) && len(dir) > len(longest) {
				want, longest = ok, dir
			}
		}
		if want == nil {
			continue
		}
		for _, dep := range ours(p.Deps) {
			if !under(dep, want...) || under(dep, "policy/service") {
				t.Errorf("%s depends on %s; it may depend only on %v", p.rel(), dep, want)
			}
		}
		if slices.Contains(p.Deps, "github.com/elazarl/goproxy") {
			t.Errorf("%s depends on goproxy", p.rel())
		}
		if longest == "policy" && slices.ContainsFunc(p.Deps, func(d string) bool { return strings.HasPrefix(d, "github.com/prometheus/") }) {
			t.Errorf("%s depends on Prometheus; only its service may", p.rel())
		}
	}
}

// Every package says what it holds in a package doc comment.
func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range packages(t) {
		if len(p.GoFiles) == 0 {
			continue // tests only, like this one
		}
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc comment", p.ImportPath)
		}
	}
}
