package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// checkFields walks a decoded YAML tree against the file structs and reports
// every key the format does not know, with its line and the keys it does
// know. (yaml.v3's KnownFields reports only the first, in its own words.)
func checkFields(n *yaml.Node, t reflect.Type, path string, errs *Errors, file string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(yaml.Node{}) {
		return // free-form; its owner checks it
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			checkFields(c, t, path, errs, file)
		}
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice {
			return // a type error; Decode reports it
		}
		for i, c := range n.Content {
			checkFields(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs, file)
		}
	case yaml.MappingNode:
		if t.Kind() != reflect.Struct {
			return
		}
		known := knownFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			ft, ok := known[key.Value]
			field := joinPath(path, key.Value)
			if !ok {
				*errs = append(*errs, &Error{File: file, Line: key.Line, Field: field,
					Msg: fmt.Sprintf("unknown field; known fields here: %s", strings.Join(sortedKeys(known), ", "))})
				continue
			}
			checkFields(val, ft, field, errs, file)
		}
	}
}

func knownFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		m[name] = f.Type
	}
	return m
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// lineOf finds the line of the value at a dotted path such as
// "network.allowlist[2].domain", or of its nearest existing parent.
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, part := range strings.Split(path, ".") {
		name, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 {
			name = part[:i]
			fmt.Sscanf(part[i:], "[%d]", &idx)
		}
		next := mappingValue(n, name)
		if next == nil {
			return line
		}
		n, line = next, next.Line
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n, line = n.Content[idx], n.Content[idx].Line
		}
	}
	return line
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
