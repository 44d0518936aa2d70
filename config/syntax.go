package config

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
)

// MaxFileSize caps a configuration file: a real one is a few kilobytes, and
// a bigger one is a mistake (or an attack on the parser).
const MaxFileSize = 16 << 20

func tooLarge(file string) Errors {
	return Errors{{File: file, Msg: fmt.Sprintf("larger than %d MiB; a config file that big is refused", MaxFileSize>>20)}}
}

// parseTree reads data as one YAML document (JSON being YAML's subset).
// A file named *.json, or one that looks like JSON and does not parse, is
// checked by a JSON parser first, so that its syntax errors come in JSON's
// terms and with a line.
func parseTree(file string, data []byte) (*yaml.Node, Errors) {
	isJSON := strings.EqualFold(filepath.Ext(file), ".json")
	if isJSON {
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
		return nil, yamlErrors(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, Errors{{File: file, Line: extra.Line, Msg: "more than one YAML document; a config file holds exactly one"}}
	}
	return &root, nil
}

func looksLikeJSON(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// jsonSyntax reports a JSON syntax error at its line; nil when data is
// well-formed JSON.
func jsonSyntax(file string, data []byte) Errors {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return nil
	}
	off := min(max(int(se.Offset)-1, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	return Errors{{File: file, Line: line, Msg: "JSON syntax error: " + se.Error()}}
}

var (
	yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	// yamlTypeNames turns the Go types in yaml.v3's messages into words.
	yamlTypeNames = strings.NewReplacer(
		"!!", "",
		"[]config.fileEntry", "a list of entries ({domain: ...})",
		"[]string", "a list of strings",
		"into string", "into a string",
		"into bool", "into true/false",
	)
	yamlStructName = regexp.MustCompile(`config\.file\w+`)
)

// yamlErrors turns yaml.v3's messages ("yaml: line 3: ...", or a list of
// "line 3: cannot unmarshal ...") into Errors with lines, and says "tab"
// where yaml.v3 complains about a character it cannot start a token with.
func yamlErrors(file string, data []byte, err error) Errors {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var errs Errors
	for _, m := range msgs {
		e := &Error{File: file, Msg: strings.TrimPrefix(strings.TrimSpace(m), "yaml: ")}
		if sm := yamlLine.FindStringSubmatch(strings.TrimSpace(m)); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			e.Msg = yamlStructName.ReplaceAllString(yamlTypeNames.Replace(sm[2]), "a mapping (key: value)")
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
