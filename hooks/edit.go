package hooks

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SetEnabled returns data, a hooks.json, with group key's "enabled" set to
// enabled, and whether that changed anything. It is a byte-level edit at
// the positions the parser recorded: the value of an existing "enabled" is
// replaced; a missing one is inserted as the group's first member, in the
// group's own layout (same line or next line, same indentation, same line
// ending). Every other byte stays as it was. A missing "enabled" means
// enabled, so enabling such a group changes nothing.
func SetEnabled(data []byte, key string, enabled bool) ([]byte, bool, error) {
	root, err := parseJSON(data)
	if err != nil {
		return nil, false, err
	}
	if root.kind != kindObject {
		return nil, false, errors.New("the top level is not an object of named groups")
	}
	var group *node
	for _, m := range root.members {
		if m.key == key {
			group = m.val // the first one: the one the loader uses
			break
		}
	}
	if group == nil {
		return nil, false, fmt.Errorf("no group %q", key)
	}
	if group.kind != kindObject {
		return nil, false, fmt.Errorf("group %q is a %s, not an object", key, group.kind)
	}
	lit := []byte("false")
	if enabled {
		lit = []byte("true")
	}
	for _, f := range group.members {
		if f.key != "enabled" {
			continue
		}
		if f.val.kind == kindBool && f.val.b == enabled {
			return data, false, nil
		}
		return splice(data, int(f.val.off), int(f.val.end), lit), true, nil
	}
	if enabled {
		return data, false, nil
	}
	return insertFirstMember(data, group, `"enabled": `+string(lit)), true, nil
}

// insertFirstMember inserts member text as the first member of object n,
// following the layout of n's current first member.
func insertFirstMember(data []byte, n *node, member string) []byte {
	open := int(n.off) + 1 // just after '{'
	if len(n.members) == 0 {
		return splice(data, open, open, []byte(member))
	}
	first := int(n.members[0].keyOff)
	between := data[open:first] // the whitespace before the first key
	if nl := bytes.LastIndexByte(between, '\n'); nl >= 0 {
		// Multi-line: a line of its own, indented like the first member.
		eol := "\n"
		if nl > 0 && between[nl-1] == '\r' {
			eol = "\r\n"
		}
		indent := string(between[nl+1:])
		return splice(data, open, open, []byte(eol+indent+member+","))
	}
	return splice(data, first, first, []byte(member+", "))
}

// WriteFileAtomic replaces path with data (same permissions), through a
// temporary file in the same directory, so a reader never sees half a
// file.
func WriteFileAtomic(path string, data []byte) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
