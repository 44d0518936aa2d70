package allowlist

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package pure (DESIGN.md: no I/O, no network library,
// no goproxy): its non-test files may import only these.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"errors": true, "fmt": true, "net/netip": true, "strings": true,
		"unicode/utf8": true, "golang.org/x/net/idna": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q; allowlist may import only the standard library's pure packages and x/net/idna", name, path)
			}
		}
	}
}
