package hooks

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/srcpos"
)

// HooksFile is where hooks.json lives, relative to the workspace and to the
// root.
const HooksFile = ".agents/hooks.json"

// DefaultTimeout is a handler's timeout when hooks.json gives none.
const DefaultTimeout = 30 * time.Second

// maxTimeout bounds a handler's timeout: beyond a day it is surely a typo.
const maxTimeout = 24 * time.Hour

// LoadOptions say where to look for hooks.json. Every field is optional.
type LoadOptions struct {
	// Workspace is the agent's working directory: its .agents/hooks.json is
	// loaded and command handlers run there. If empty, the current
	// directory.
	Workspace string
	// Root stands for "/": Root/.agents/hooks.json is the authoritative
	// file (a read-only mount). If empty, "/".
	Root string
}

// HandlerType is "command" or "http".
type HandlerType string

const (
	CommandHandler HandlerType = "command"
	HTTPHandler    HandlerType = "http"
)

// Hooks is the compiled content of the hooks.json files.
type Hooks struct {
	// Files are the hooks.json files that were found, root first.
	Files []string
	// Searched are the paths where hooks.json was looked for, root first.
	Searched []string
	// Workspace is where command handlers run.
	Workspace string
	// Groups in run order: the root file's groups, then the workspace's,
	// each in file order. Groups shadowed by a root group are not here.
	Groups []*Group
}

// Group is a named hook group.
type Group struct {
	Name    string
	Enabled bool
	File    string
	Line    int
	Rules   map[EventKind][]*Rule
}

// Rule is one {matcher, hooks} entry.
type Rule struct {
	Matcher  *Matcher
	Handlers []*Handler
	Line     int
}

// Handler is one hook handler.
type Handler struct {
	Type     HandlerType
	Command  string            // command handlers
	URL      string            // http handlers
	Headers  map[string]string // http handlers: non-secret headers
	Timeout  time.Duration
	FailDeny bool   // "on_failure": "deny"
	Field    string // where it was declared, e.g. audit.post_tool_execution[0].hooks[1]
	File     string
	Line     int
	// Invalid is non-empty when the handler's configuration is broken:
	// running it yields a spawn-error outcome with this text, so a broken
	// fail-closed handler still denies.
	Invalid string
}

// Name is a short identifier for logs: the command line or the URL.
func (h *Handler) Name() string {
	s := h.Command
	if h.Type == HTTPHandler {
		s = h.URL
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Load discovers and compiles Root/.agents/hooks.json and
// Workspace/.agents/hooks.json. Missing files are fine (no hooks). Problems
// in the files are returned, not fatal: what can be used is used (an
// invalid matcher matches nothing, an invalid handler fails when run). The
// error is non-nil only when a file exists but cannot be read.
func Load(opts LoadOptions) (*Hooks, srcpos.Errors, error) {
	ws := opts.Workspace
	if ws == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, nil, fmt.Errorf("hooks: workspace: %w", err)
		}
		ws = wd
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		return nil, nil, fmt.Errorf("hooks: workspace: %w", err)
	}
	root := opts.Root
	if root == "" {
		root = "/"
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, nil, fmt.Errorf("hooks: root: %w", err)
	}

	h := &Hooks{Workspace: ws}
	var problems srcpos.Errors
	rootNames := map[string]bool{}

	rootFile := filepath.Join(root, HooksFile)
	wsFile := filepath.Join(ws, HooksFile)
	h.Searched = []string{rootFile, wsFile}
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		problems = append(problems, &srcpos.Error{
			Severity: srcpos.SeverityWarning, File: rootFile,
			Msg:  fmt.Sprintf("the root directory %s does not exist, so no root hooks.json is loaded", root),
			Hint: "check --root (the directory standing for /, whose .agents/hooks.json is authoritative)",
		})
	}
	rootInfo, rerr := os.Stat(rootFile)
	wsInfo, werr := os.Stat(wsFile)
	if werr == nil && rerr == nil && os.SameFile(rootInfo, wsInfo) {
		werr = fs.ErrNotExist // the workspace is the root: one file
		h.Searched = h.Searched[:1]
	}

	for _, f := range []struct {
		path   string
		err    error
		isRoot bool
	}{{rootFile, rerr, true}, {wsFile, werr, false}} {
		if errors.Is(f.err, fs.ErrNotExist) {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, problems, fmt.Errorf("hooks: %w", err)
		}
		h.Files = append(h.Files, f.path)
		groups, ps := compileFile(f.path, data)
		problems = append(problems, ps...)
		for _, g := range groups {
			if !f.isRoot && rootNames[g.Name] {
				problems = append(problems, &srcpos.Error{
					Severity: srcpos.SeverityWarning, File: f.path, Line: g.Line, Field: g.Name,
					Msg:  fmt.Sprintf("group %q is defined in %s, which wins; this one is ignored", g.Name, rootFile),
					Hint: "rename the group to add hooks; the root file's groups cannot be replaced or disabled from the workspace",
				})
				continue
			}
			if f.isRoot {
				rootNames[g.Name] = true
			}
			h.Groups = append(h.Groups, g)
		}
	}
	return h, problems, nil
}

// fileCompiler turns one file's JSON tree into groups, collecting problems.
type fileCompiler struct {
	path     string
	data     []byte
	problems srcpos.Errors
}

func (c *fileCompiler) problem(sev srcpos.Severity, off int64, field, msg, hint string) {
	line, col := lineCol(c.data, off)
	c.problems = append(c.problems, &srcpos.Error{Severity: sev, File: c.path, Line: line, Column: col, Field: field, Msg: msg, Hint: hint})
}

func (c *fileCompiler) errorf(off int64, field, format string, args ...any) {
	c.problem(srcpos.SeverityError, off, field, fmt.Sprintf(format, args...), "")
}

func compileFile(path string, data []byte) ([]*Group, srcpos.Errors) {
	c := &fileCompiler{path: path, data: data}
	root, err := parseJSON(data)
	if err != nil {
		var pe *posError
		off := int64(0)
		if errors.As(err, &pe) {
			off = pe.off
		}
		c.problem(srcpos.SeverityError, off, "", err.Error()+"; the whole file is ignored", "")
		return nil, c.problems
	}
	if root.kind != kindObject {
		c.errorf(root.off, "", "the top level must be an object of named groups, not %s; the whole file is ignored", root.kind)
		return nil, c.problems
	}
	var groups []*Group
	seen := map[string]bool{}
	for _, m := range root.members {
		if seen[m.key] {
			c.errorf(m.keyOff, m.key, "duplicate group name; only the first is used")
			continue
		}
		seen[m.key] = true
		if g := c.group(m); g != nil {
			groups = append(groups, g)
		}
	}
	return groups, c.problems
}

// groupFieldHint points a field name of another hook format (or a
// near-miss spelling of ours) at our event names; "" when it has none.
func groupFieldHint(key string) string {
	switch strings.ToLower(key) {
	case "pretooluse":
		return `this file uses hook groups; write "pre_tool_execution"`
	case "posttooluse":
		return `this file uses hook groups; write "post_tool_execution"`
	case "pre_tool_use", "pretoolexecution", "pre-tool-execution":
		return `write "pre_tool_execution"`
	case "post_tool_use", "posttoolexecution", "post-tool-execution":
		return `write "post_tool_execution"`
	}
	return ""
}

func (c *fileCompiler) group(m member) *Group {
	name := m.key
	g := &Group{Name: name, Enabled: true, File: c.path, Rules: map[EventKind][]*Rule{}}
	g.Line, _ = lineCol(c.data, m.keyOff)
	if name == "" {
		c.errorf(m.keyOff, `""`, "empty group name")
	}
	if m.val.kind != kindObject {
		hint := ""
		if name == "hooks" {
			hint = `this looks like another tool's hooks format; hooks.json here maps group names to {"pre_tool_execution": [...], "post_tool_execution": [...]}`
		}
		c.problem(srcpos.SeverityError, m.val.off, name, fmt.Sprintf("a group must be an object, not %s; group ignored", m.val.kind), hint)
		return nil
	}
	seen := map[string]bool{}
	for _, f := range m.val.members {
		field := name + "." + f.key
		if seen[f.key] {
			c.errorf(f.keyOff, field, "duplicate field; only the first is used")
			continue
		}
		seen[f.key] = true
		switch f.key {
		case "enabled":
			if f.val.kind != kindBool {
				c.errorf(f.val.off, field, "must be true or false, not %s; the group stays enabled", f.val.kind)
				continue
			}
			g.Enabled = f.val.b
		case string(PreToolExecution), string(PostToolExecution):
			g.Rules[EventKind(f.key)] = c.rules(field, f.val)
		default:
			hint := groupFieldHint(f.key)
			if hint == "" {
				hint = suggest(f.key, "enabled", string(PreToolExecution), string(PostToolExecution))
			}
			c.problem(srcpos.SeverityError, f.keyOff, field, "unknown field", hint)
		}
	}
	if len(g.Rules) == 0 {
		c.problem(srcpos.SeverityWarning, m.keyOff, name, "group has no pre_tool_execution or post_tool_execution hooks", "")
	}
	return g
}

func (c *fileCompiler) rules(field string, n *node) []*Rule {
	if n.kind != kindArray {
		c.errorf(n.off, field, "must be a list of {\"matcher\", \"hooks\"}, not %s", n.kind)
		return nil
	}
	var rules []*Rule
	for i, rn := range n.arr {
		rf := fmt.Sprintf("%s[%d]", field, i)
		if rn.kind != kindObject {
			c.errorf(rn.off, rf, "must be an object {\"matcher\", \"hooks\"}, not %s", rn.kind)
			continue
		}
		r := &Rule{Matcher: compileMatcher("")}
		r.Line, _ = lineCol(c.data, rn.off)
		var hasMatcher, hasHooks bool
		for _, f := range rn.members {
			ff := rf + "." + f.key
			switch f.key {
			case "matcher":
				if hasMatcher {
					c.errorf(f.keyOff, ff, "duplicate field; only the first is used")
					continue
				}
				hasMatcher = true
				if f.val.kind != kindString {
					c.errorf(f.val.off, ff, "must be a string (an RE2 pattern), not %s; this rule matches nothing", f.val.kind)
					r.Matcher = &Matcher{pattern: "", err: errors.New("not a string")}
					continue
				}
				r.Matcher = compileMatcher(f.val.str)
				if err := r.Matcher.Err(); err != nil {
					c.problem(srcpos.SeverityError, f.val.off, ff,
						fmt.Sprintf("invalid RE2 pattern %q: %s; this rule matches nothing", f.val.str, strings.TrimPrefix(err.Error(), "error parsing regexp: ")),
						matcherHint(f.val.str, err))
				} else if hint := matcherHint(f.val.str, nil); hint != "" {
					c.problem(srcpos.SeverityWarning, f.val.off, ff, fmt.Sprintf("pattern %q is RE2, not a glob", f.val.str), hint)
				}
			case "hooks":
				if hasHooks {
					c.errorf(f.keyOff, ff, "duplicate field; only the first is used")
					continue
				}
				hasHooks = true
				if f.val.kind != kindArray {
					c.errorf(f.val.off, ff, "must be a list of handlers, not %s", f.val.kind)
					continue
				}
				for j, hn := range f.val.arr {
					if h := c.handler(fmt.Sprintf("%s[%d]", ff, j), hn); h != nil {
						r.Handlers = append(r.Handlers, h)
					}
				}
			default:
				c.problem(srcpos.SeverityError, f.keyOff, ff, "unknown field", suggest(f.key, "matcher", "hooks"))
			}
		}
		if !hasMatcher {
			c.problem(srcpos.SeverityWarning, rn.off, rf, `no "matcher": the rule matches every tool`, `write "matcher": "*" to say so`)
		}
		if !hasHooks || len(r.Handlers) == 0 {
			c.problem(srcpos.SeverityWarning, rn.off, rf, "rule has no handlers", "")
		}
		rules = append(rules, r)
	}
	return rules
}

func (c *fileCompiler) handler(field string, n *node) *Handler {
	if n.kind != kindObject {
		c.errorf(n.off, field, "a handler must be an object, not %s; handler ignored", n.kind)
		return nil
	}
	h := &Handler{Type: CommandHandler, Timeout: DefaultTimeout, Field: field, File: c.path}
	h.Line, _ = lineCol(c.data, n.off)
	var invalid []string
	fields := map[string]member{}
	for _, f := range n.members {
		if _, dup := fields[f.key]; dup {
			c.errorf(f.keyOff, field+"."+f.key, "duplicate field; only the first is used")
			continue
		}
		fields[f.key] = f
	}
	// Type first: it decides which fields belong.
	if f, ok := fields["type"]; ok {
		switch {
		case f.val.kind != kindString:
			c.errorf(f.val.off, field+".type", `must be "command" or "http", not %s`, f.val.kind)
			invalid = append(invalid, "bad type")
		case f.val.str == "command" || f.val.str == "http":
			h.Type = HandlerType(f.val.str)
		default:
			c.problem(srcpos.SeverityError, f.val.off, field+".type", fmt.Sprintf(`unknown handler type %q`, f.val.str), suggest(f.val.str, "command", "http"))
			invalid = append(invalid, fmt.Sprintf("unknown handler type %q", f.val.str))
		}
	}
	allowed := map[string]bool{"type": true, "timeout": true, "on_failure": true}
	if h.Type == HTTPHandler {
		allowed["url"], allowed["headers"] = true, true
	} else {
		allowed["command"] = true
	}
	for _, f := range n.members {
		if fields[f.key].keyOff != f.keyOff {
			continue // duplicate, reported
		}
		ff := field + "." + f.key
		if !allowed[f.key] {
			hint := suggest(f.key, "type", "command", "url", "headers", "timeout", "on_failure")
			switch {
			case f.key == "url" || f.key == "headers":
				hint = `"url" and "headers" belong to "type": "http" handlers`
			case f.key == "command":
				hint = `"command" belongs to "type": "command" handlers`
			}
			c.problem(srcpos.SeverityError, f.keyOff, ff, "unknown field", hint)
			continue
		}
		switch f.key {
		case "command":
			if f.val.kind != kindString || strings.TrimSpace(f.val.str) == "" {
				c.errorf(f.val.off, ff, "must be a non-empty string")
				invalid = append(invalid, "no command")
				continue
			}
			h.Command = f.val.str
		case "url":
			if f.val.kind != kindString {
				c.errorf(f.val.off, ff, "must be a string, not %s", f.val.kind)
				invalid = append(invalid, "no url")
				continue
			}
			h.URL = f.val.str
			if msg, hint := checkHookURL(f.val.str); msg != "" {
				c.problem(srcpos.SeverityError, f.val.off, ff, msg, hint)
				invalid = append(invalid, msg)
			}
		case "headers":
			h.Headers = c.headers(ff, f.val)
		case "timeout":
			d, ok := c.timeout(ff, f.val)
			if ok {
				h.Timeout = d
			}
		case "on_failure":
			switch {
			case f.val.kind == kindString && f.val.str == "allow":
			case f.val.kind == kindString && f.val.str == "deny":
				h.FailDeny = true
			default:
				// Someone asked for a non-default failure mode and misspelt
				// it: fail closed rather than silently open.
				c.problem(srcpos.SeverityError, f.val.off, ff, `must be "allow" or "deny"; treated as "deny"`, "")
				h.FailDeny = true
			}
		}
	}
	switch h.Type {
	case CommandHandler:
		if _, ok := fields["command"]; !ok {
			c.errorf(n.off, field, `command handler without "command"`)
			invalid = append(invalid, "no command")
		}
	case HTTPHandler:
		if _, ok := fields["url"]; !ok {
			c.errorf(n.off, field, `http handler without "url"`)
			invalid = append(invalid, "no url")
		}
	}
	if len(invalid) > 0 {
		h.Invalid = "invalid handler in " + c.path + ": " + strings.Join(invalid, "; ")
	}
	return h
}

func (c *fileCompiler) timeout(field string, n *node) (time.Duration, bool) {
	if n.kind != kindNumber {
		c.problem(srcpos.SeverityError, n.off, field, fmt.Sprintf("must be a number of seconds, not %s; using the default %v", n.kind, DefaultTimeout), "")
		return 0, false
	}
	s, err := n.num.Float64()
	if err != nil || math.IsNaN(s) || s <= 0 {
		c.errorf(n.off, field, "must be a positive number of seconds; using the default %v", DefaultTimeout)
		return 0, false
	}
	d := time.Duration(s * float64(time.Second))
	if s > maxTimeout.Seconds() {
		c.errorf(n.off, field, "is more than a day; capped at %v", maxTimeout)
		d = maxTimeout
	}
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return d, true
}

func (c *fileCompiler) headers(field string, n *node) map[string]string {
	if n.kind != kindObject {
		c.errorf(n.off, field, "must be an object of header name to string value, not %s", n.kind)
		return nil
	}
	out := map[string]string{}
	for _, m := range n.members {
		hf := field + "." + m.key
		if !validHeaderName(m.key) {
			c.errorf(m.keyOff, hf, "invalid header name")
			continue
		}
		if m.val.kind != kindString {
			c.errorf(m.val.off, hf, "header value must be a string, not %s", m.val.kind)
			continue
		}
		if strings.ContainsAny(m.val.str, "\r\n\x00") {
			c.errorf(m.val.off, hf, "header value contains a line break or NUL")
			continue
		}
		if reservedHeader(m.key) {
			c.problem(srcpos.SeverityError, m.keyOff, hf, "header is set by the hook runtime and cannot be configured; ignored", "")
			continue
		}
		if bad, why := looksLikeCredential(m.key, m.val.str); bad {
			c.problem(srcpos.SeverityWarning, m.keyOff, hf, why+"; hooks.json headers are for non-secret values",
				`put credentials in the gateway's network.allowlist[].transform, which injects them outside the sandbox`)
		}
		out[m.key] = m.val.str
	}
	return out
}

// checkHookURL returns a problem message and hint when u cannot be used.
func checkHookURL(raw string) (msg, hint string) {
	u, err := url.Parse(raw)
	if err != nil {
		return "invalid URL: " + err.Error(), ""
	}
	if u.Scheme != "https" {
		h := ""
		if u.Scheme == "http" {
			h = "use https://; the gateway only lets credentials travel encrypted"
		}
		return fmt.Sprintf("URL must be https://, not %q", u.Scheme+"://"), h
	}
	if u.Host == "" || u.Hostname() == "" {
		return "URL has no host", ""
	}
	if u.User != nil {
		return "URL must not carry credentials (user:password@)", "put credentials in the gateway's network.allowlist[].transform"
	}
	return "", ""
}

// suggest returns `did you mean "x"?` for the closest candidate within a
// small edit distance, or "".
func suggest(got string, candidates ...string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(got), c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
