// Package yamldoc reads the YAML (or JSON) files hookgate is configured
// with — the gateway config and the tool policy — into a yaml.Node tree,
// with every syntax problem as a file:line error in words a user can act
// on: JSON's own terms for a JSON file, "tab" for a tab in the
// indentation, exactly one document per file. The schema checks that walk
// the tree belong to each file's owner; Describe names a node for their
// messages.
package yamldoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hookgate/hookgate/internal/srcpos"
)

// Parse reads data as one YAML document (JSON being YAML's subset). A file
// named *.json, or one that looks like JSON and does not parse, is checked
// by a JSON parser first, so that its syntax errors come in JSON's terms
// and with a line. An empty file gives an empty node (Kind 0) and no
// error: whether that is allowed is the caller's to say.
func Parse(file string, data []byte) (*yaml.Node, srcpos.Errors) {
	if strings.EqualFold(filepath.Ext(file), ".json") {
		if errs := jsonSyntax(file, data); errs != nil {
			return nil, errs
		}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		if looksLikeJSON(data) {
			if errs := jsonSyntax(file, data); errs != nil {
				return nil, errs
			}
		}
		return nil, Errors(file, data, err, nil)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, srcpos.Errors{{File: file, Line: extra.Line, Msg: "more than one YAML document; the file holds exactly one"}}
	}
	return &root, nil
}

func looksLikeJSON(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// jsonSyntax reports a JSON syntax error at its line; nil when data is
// well-formed JSON.
func jsonSyntax(file string, data []byte) srcpos.Errors {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return nil
	}
	off := min(max(int(se.Offset)-1, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	return srcpos.Errors{{File: file, Line: line, Msg: "JSON syntax error: " + se.Error()}}
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// Errors turns yaml.v3's messages ("yaml: line 3: ...", or the list of a
// *yaml.TypeError) into errors with lines, saying "tab" where yaml.v3
// complains about a character it cannot start a token with. words, if not
// nil, rewrites each message (Go type names into the file's terms).
func Errors(file string, data []byte, err error, words func(string) string) srcpos.Errors {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var errs srcpos.Errors
	for _, m := range msgs {
		m = strings.TrimSpace(m)
		e := &srcpos.Error{File: file, Msg: strings.TrimPrefix(m, "yaml: ")}
		if sm := yamlLine.FindStringSubmatch(m); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			e.Msg = sm[2]
		}
		if words != nil {
			e.Msg = words(e.Msg)
		}
		if e.Line > 0 && (strings.Contains(e.Msg, "tab character") || strings.Contains(e.Msg, "cannot start any token")) {
			if line, ok := tabLine(data, e.Line); ok {
				e.Line = line
				e.Msg = "a tab character in the indentation; YAML indents with spaces only"
			}
		}
		errs = append(errs, e)
	}
	return errs
}

// tabLine finds the line, at or just after the one yaml.v3 names, that is
// indented with a tab.
func tabLine(data []byte, near int) (int, bool) {
	lines := bytes.Split(data, []byte("\n"))
	for l := near; l <= near+1 && l <= len(lines); l++ {
		text := lines[l-1]
		indent := text[:len(text)-len(bytes.TrimLeft(text, " \t"))]
		if bytes.IndexByte(indent, '\t') >= 0 {
			return l, true
		}
	}
	return 0, false
}

// Describe names what a node is read as, for messages ("the number 5",
// "a list", "null (an empty value)").
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "null (an empty value)"
	case "!!bool":
		return fmt.Sprintf("the boolean %s", n.Value)
	case "!!int", "!!float":
		return fmt.Sprintf("the number %s", n.Value)
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	}
	return fmt.Sprintf("%s (%s)", n.Value, strings.TrimPrefix(n.Tag, "!!"))
}
