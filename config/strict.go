package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/yamldoc"
	"gopkg.in/yaml.v3"
)

// YAML's resolved tags for plain scalars.
const (
	tagStr   = "!!str"
	tagInt   = "!!int"
	tagFloat = "!!float"
	tagBool  = "!!bool"
	tagNull  = "!!null"
)

var (
	yamlNodeType      = reflect.TypeOf(yaml.Node{})
	durationType      = reflect.TypeOf(time.Duration(0))
	durationTextType  = reflect.TypeOf(durationText(""))
	yamlUnmarshalType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
)

// treeChecker walks a decoded YAML tree against the file structs before
// anything is decoded, and reports every key the format does not know, every
// key set twice and every value of the wrong type, with its line and field
// path. yaml.v3 alone stops at the first problem, reports type errors
// without the field, and coerces silently: `domain: 5` would decode as the
// string "5" (and then parse as the address 0.0.0.5), `domain: on` as the
// name "on".
//
// A bad value is replaced by null and a repeated key is dropped, so the
// tree then decodes and the rest of the file is still checked; the fields
// it spoiled are remembered, so their zero values raise no second error.
type treeChecker struct {
	file string
	errs *Errors
	// bad holds the paths of fields already reported.
	bad map[string]bool
	// seen holds the aliased nodes already checked (against a type): an
	// anchor is checked once however often it is used, so that lists of
	// aliases to nodes holding lists of aliases cannot multiply the walk.
	seen map[aliasUse]bool
}

type aliasUse struct {
	n *yaml.Node
	t reflect.Type
}

func (c *treeChecker) report(n *yaml.Node, path, format string, args ...any) {
	*c.errs = append(*c.errs, &Error{File: c.file, Line: n.Line, Field: path, Msg: fmt.Sprintf(format, args...)})
	c.bad[path] = true
}

// reject reports a bad value and nulls it.
func (c *treeChecker) reject(n *yaml.Node, path, format string, args ...any) {
	c.report(n, path, format, args...)
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: tagNull, Line: n.Line, Column: n.Column}
}

func (c *treeChecker) check(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		use := aliasUse{n, t}
		if c.seen[use] {
			return
		}
		if c.seen == nil {
			c.seen = map[aliasUse]bool{}
		}
		c.seen[use] = true
	}
	if n.Kind == yaml.DocumentNode {
		for _, d := range n.Content {
			c.check(d, t, path)
		}
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == yamlNodeType || reflect.PointerTo(t).Implements(yamlUnmarshalType) {
		return // free-form or self-decoding; its owner checks it
	}
	if t == durationType {
		c.duration(n, path)
		return
	}
	if t == durationTextType {
		c.durationText(n, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		c.mapping(n, t, path)
	case reflect.Map:
		c.mapOf(n, t, path)
	case reflect.Slice:
		c.list(n, t, path)
	case reflect.String:
		c.str(n, path)
	case reflect.Bool:
		c.scalar(n, path, "true or false", tagBool)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		c.scalar(n, path, "a whole number", tagInt)
	case reflect.Float32, reflect.Float64:
		c.scalar(n, path, "a number", tagInt, tagFloat)
	}
}

// mapping checks a section: known keys, each once, each of its type.
func (c *treeChecker) mapping(n *yaml.Node, t reflect.Type, path string) {
	if isNull(n) {
		return // an empty section: every field takes its default
	}
	if n.Kind != yaml.MappingNode {
		c.reject(n, orTop(path), "must be a mapping (key: value), not %s", describe(n))
		return
	}
	known := knownFields(t)
	seen := map[string]int{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		field := joinPath(path, key.Value)
		if first, dup := seen[key.Value]; dup {
			c.report(key, field, "set twice (first on line %d); keep one", first)
			continue
		}
		seen[key.Value] = key.Line
		kept = append(kept, key, val)
		ft, ok := known[key.Value]
		if !ok {
			c.report(key, field, "unknown field; known fields here: %s", strings.Join(sortedKeys(known), ", "))
			continue
		}
		c.check(val, ft, field)
	}
	n.Content = kept
}

func (c *treeChecker) mapOf(n *yaml.Node, t reflect.Type, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		c.reject(n, path, "must be a mapping (key: value), not %s", describe(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		c.check(n.Content[i+1], t.Elem(), joinPath(path, n.Content[i].Value))
	}
}

func (c *treeChecker) list(n *yaml.Node, t reflect.Type, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		hint := ""
		switch first := firstField(t.Elem()); {
		case first != "":
			hint = fmt.Sprintf(`; write each item as "- %s: ..."`, first)
		case n.Kind == yaml.ScalarNode:
			hint = fmt.Sprintf(`; for one item write [%s]`, quoteFor(n))
		}
		c.reject(n, path, "must be a list, not %s%s", describe(n), hint)
		return
	}
	for i, e := range n.Content {
		c.check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
	}
}

// str accepts only what YAML reads as a string, and refuses the plain words
// that YAML 1.1 tools read as booleans.
func (c *treeChecker) str(n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode {
		c.reject(n, path, "must be a string, not %s", describe(n))
		return
	}
	switch {
	case n.Tag == tagNull:
		c.reject(n, path, `is empty (null); give a value, "" for none, or remove the line`)
	case n.Tag != tagStr:
		c.reject(n, path, "must be a string, but %s is read as %s; quote it: %s", n.Value, describe(n), quoteFor(n))
	case n.Style == 0 && isYAML11Bool(n.Value):
		c.reject(n, path, "%s is a boolean to some YAML readers; quote it if you mean the string: %s", n.Value, quoteFor(n))
	}
}

// scalar accepts a plain value whose resolved tag is one of tags.
func (c *treeChecker) scalar(n *yaml.Node, path, want string, tags ...string) {
	if n.Kind == yaml.ScalarNode {
		for _, tag := range tags {
			if n.Tag == tag {
				return
			}
		}
	}
	switch {
	case n.Kind != yaml.ScalarNode || n.Tag == tagNull:
		c.reject(n, path, "must be %s, not %s", want, describe(n))
	case n.Style != 0:
		c.reject(n, path, "must be %s, not the string %q; remove the quotes", want, n.Value)
	default:
		c.reject(n, path, "must be %s, not %s", want, describe(n))
	}
}

// durationText is a string, except that a bare number gets the unit it lacks
// as its hint.
func (c *treeChecker) durationText(n *yaml.Node, path string) {
	if n.Kind == yaml.ScalarNode && (n.Tag == tagInt || n.Tag == tagFloat) {
		c.reject(n, path, "%q has no unit; did you mean %q?", n.Value, n.Value+"s")
		return
	}
	c.str(n, path)
}

func (c *treeChecker) duration(n *yaml.Node, path string) {
	if n.Kind == yaml.ScalarNode && n.Tag == tagStr {
		if _, err := time.ParseDuration(n.Value); err == nil {
			return
		}
	}
	c.reject(n, path, "must be a duration such as 10s or 1m30s, not %s", describe(n))
}

// describe names what a node is read as, for messages.
func describe(n *yaml.Node) string { return yamldoc.Describe(n) }

func quoteFor(n *yaml.Node) string { return fmt.Sprintf("%q", n.Value) }

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == tagNull }

// isYAML11Bool: the words YAML 1.1 (and so many tools) reads as booleans,
// though yaml.v3 reads them as strings.
func isYAML11Bool(s string) bool {
	switch strings.ToLower(s) {
	case "yes", "no", "on", "off":
		return true
	}
	return false
}

func orTop(path string) string {
	if path == "" {
		return "(top level)"
	}
	return path
}

// firstField is the YAML name of a struct's first field, for hints; "" for
// anything else.
func firstField(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	for i := 0; i < t.NumField(); i++ {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			return name
		}
	}
	return ""
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

// coveredBy reports whether field is, or lies under, a path in bad.
func coveredBy(bad map[string]bool, field string) bool {
	for p := field; p != ""; {
		if bad[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
	return false
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
