// Package srcpos is the error type of hookgate's configuration files: a
// problem found at a place in a file, written "file:line: field: message".
// The gateway's config file (package config) and hooks.json (package hooks)
// both report their problems with it, so an operator reads the two the
// same way and an editor can jump to the line.
package srcpos

import (
	"fmt"
	"strings"
)

// Severity says whether a problem stops the file from working as written.
// A list that holds only errors (config's) leaves it empty; hooks.json's
// list mixes both and names each.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Error is one problem in a file. Its text is
//
//	file:line:column: severity: field: message (hint: hint)
//
// where each part but file and message is left out when zero or empty (the
// column only ever follows a line).
type Error struct {
	File     string
	Line     int      // 1-based; 0 when the problem concerns the whole file
	Column   int      // 1-based; 0 when unknown
	Severity Severity // "" when the list it is in says it
	Field    string   // dotted path, e.g. network.allowlist[2].domain
	Msg      string
	Hint     string // a suggested fix, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Severity != "" {
		b.WriteString(": ")
		b.WriteString(string(e.Severity))
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString(" (hint: " + e.Hint + ")")
	}
	return b.String()
}

// Errors is every problem found in a file (or files), in file order.
type Errors []*Error

// Error is one problem a line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// HasErrors reports whether any problem is an error rather than a warning
// (a problem without a severity counts as an error).
func (es Errors) HasErrors() bool {
	for _, e := range es {
		if e.Severity != SeverityWarning {
			return true
		}
	}
	return false
}
