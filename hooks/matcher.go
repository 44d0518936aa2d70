package hooks

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	re2 "github.com/wasilibs/go-re2"
)

// Matcher decides whether a hook rule applies to a tool name. The pattern
// is RE2 and must match the whole name; "", "*" and ".*" match every tool.
// A pattern that does not compile matches nothing.
//
// Matching is exact RE2 semantics (go-re2) with two fast paths that give the
// same answers: catch-alls, and patterns whose language is a small finite
// set of strings ("code_execution", "read_file|write_file"), which are
// looked up in a set instead of running the regexp engine.
type Matcher struct {
	pattern string
	all     bool
	set     map[string]struct{} // non-nil: the finite language of the pattern
	re      *re2.Regexp
	err     error
}

// compileMatcher compiles pattern. On error the Matcher matches nothing and
// Err returns why.
func compileMatcher(pattern string) *Matcher {
	m := &Matcher{pattern: pattern}
	if isCatchAll(pattern) {
		m.all = true
		return m
	}
	// Check the syntax with the standard library first (the same RE2
	// syntax): go-re2's WebAssembly build prints parse errors to the
	// process's stderr, which would garble `gateway hooks check`.
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		m.err = err
		return m
	}
	m.re, m.err = re2.Compile("^(?:" + pattern + ")$")
	if m.err != nil {
		m.re = nil
		return m
	}
	if strs, ok := finiteStrings(re.Simplify(), 64); ok {
		m.set = make(map[string]struct{}, len(strs))
		for _, s := range strs {
			m.set[s] = struct{}{}
		}
	}
	return m
}

func isCatchAll(p string) bool { return p == "" || p == "*" || p == ".*" }

// Pattern is the pattern as written in hooks.json.
func (m *Matcher) Pattern() string { return m.pattern }

// Err is the compile error, or nil.
func (m *Matcher) Err() error { return m.err }

// MatchesAll reports whether the matcher is a catch-all.
func (m *Matcher) MatchesAll() bool { return m.all }

// Match reports whether tool matches.
func (m *Matcher) Match(tool string) bool {
	switch {
	case m.all:
		return true
	case m.set != nil:
		_, ok := m.set[tool]
		return ok
	case m.re != nil:
		return m.re.MatchString(tool)
	}
	return false
}

// finiteStrings enumerates the strings a regexp matches when that set is
// finite and at most limit long; ok is false otherwise (or when flags such
// as case folding make enumeration unsafe).
func finiteStrings(re *syntax.Regexp, limit int) (out []string, ok bool) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return []string{""}, true
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		return []string{string(re.Rune)}, true
	case syntax.OpCharClass:
		var s []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if len(s) >= limit || !utf8.ValidRune(r) {
					return nil, false
				}
				s = append(s, string(r))
			}
		}
		return s, true
	case syntax.OpCapture:
		return finiteStrings(re.Sub[0], limit)
	case syntax.OpQuest:
		s, ok := finiteStrings(re.Sub[0], limit-1)
		if !ok {
			return nil, false
		}
		return append([]string{""}, s...), true
	case syntax.OpAlternate:
		var s []string
		for _, sub := range re.Sub {
			ss, ok := finiteStrings(sub, limit-len(s))
			if !ok {
				return nil, false
			}
			s = append(s, ss...)
		}
		return s, true
	case syntax.OpConcat:
		acc := []string{""}
		for _, sub := range re.Sub {
			ss, ok := finiteStrings(sub, limit)
			if !ok || len(acc)*len(ss) > limit {
				return nil, false
			}
			next := make([]string, 0, len(acc)*len(ss))
			for _, a := range acc {
				for _, b := range ss {
					next = append(next, a+b)
				}
			}
			acc = next
		}
		return acc, true
	}
	return nil, false
}

// matcherHint suggests a fix for a pattern that failed to compile, or
// warns about a valid pattern that was probably meant as a glob.
func matcherHint(pattern string, compileErr error) string {
	if compileErr != nil {
		if strings.ContainsAny(pattern, "*?") {
			g := globToRE2(pattern)
			if _, err := syntax.Parse(g, syntax.Perl); err == nil {
				return fmt.Sprintf("%q is a glob, not RE2; did you mean %q?", pattern, g)
			}
		}
		return ""
	}
	// Valid RE2, but a '*' right after a letter, digit or '_' repeats that
	// character: "read_*" matches "read" and "read___", not "read_file".
	for i := 1; i < len(pattern); i++ {
		if pattern[i] == '*' && isWordByte(pattern[i-1]) {
			return fmt.Sprintf("in RE2 '*' repeats the character before it; if %q is meant as a glob, write %q", pattern, globToRE2(pattern))
		}
	}
	return ""
}

func isWordByte(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// globToRE2 rewrites shell-glob wildcards into RE2: '*' → ".*", '?' → "."
// (a '*' already preceded by '.' is kept).
func globToRE2(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '*' && (i == 0 || p[i-1] != '.'):
			b.WriteString(".*")
		case c == '?' && (i == 0 || p[i-1] != ')'):
			b.WriteByte('.')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
