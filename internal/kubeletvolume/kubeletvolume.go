// Package kubeletvolume writes a directory the way the kubelet writes
// ConfigMap and Secret volumes, for tests of what watches them: the files
// live in a timestamped directory, "..data" is a symlink to it, each
// visible name is a symlink through "..data", and an update makes a new
// directory and renames a new "..data" symlink over the old one (one
// atomic swap), then removes the old directory and the names gone.
package kubeletvolume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Volume is one such directory; Dir must exist. The zero count is ready.
type Volume struct {
	Dir string
	n   int
}

// Write swaps the volume's content for files (name → content).
func (v *Volume) Write(t testing.TB, files map[string]string) {
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_12_01_00_00_%02d.%d", v.n, v.n)
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	if err := os.Mkdir(filepath.Join(v.Dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(v.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries { // names gone from the volume go away
		if _, ok := files[e.Name()]; !ok && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(v.Dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name := range files {
		link := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
