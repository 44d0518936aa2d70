package kubeletvolume

import (
	"os"
	"path/filepath"
	"testing"
)

// Each write is visible through the names, the old directory is gone, and
// a name left out of a write leaves the volume.
func TestWriteSwapsTheContent(t *testing.T) {
	v := &Volume{Dir: t.TempDir()}
	v.Write(t, map[string]string{"a": "1", "b": "2"})
	first, err := os.Readlink(filepath.Join(v.Dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	v.Write(t, map[string]string{"a": "3"})
	if got, err := os.ReadFile(filepath.Join(v.Dir, "a")); err != nil || string(got) != "3" {
		t.Errorf("a = %q, %v; want 3", got, err)
	}
	if _, err := os.Lstat(filepath.Join(v.Dir, "b")); !os.IsNotExist(err) {
		t.Errorf("b still there after a write without it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(v.Dir, first)); !os.IsNotExist(err) {
		t.Errorf("the first data directory %s still there: %v", first, err)
	}
	if link, err := os.Readlink(filepath.Join(v.Dir, "a")); err != nil || link != filepath.Join("..data", "a") {
		t.Errorf("a is %q, %v; want a symlink through ..data", link, err)
	}
}
