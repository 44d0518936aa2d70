package hooks

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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

// GlobalFile is the agent-CLI global hooks.json, relative to the home
// directory.
const GlobalFile = ".gemini/config/hooks.json"

// PluginFile is a plugin's hooks.json, relative to the plugin's directory.
const PluginFile = "hooks.json"

// LoadOptions say where to look for hooks.json. Every field is optional.
//
// The files are loaded, and their groups run, in this order: the root
// file, the workspace files (Workspace, then Workspaces), the global file,
// then the plugins' files (each plugin directory in order, its plugins by
// name). The same file reached twice is loaded once.
type LoadOptions struct {
	// Workspace is the agent's working directory: its .agents/hooks.json is
	// loaded and command handlers run there. If empty, the current
	// directory.
	Workspace string
	// Workspaces are more workspace directories: each one's
	// .agents/hooks.json is loaded, and its commands run in it.
	Workspaces []string
	// Root stands for "/": Root/.agents/hooks.json is the authoritative
	// file (a read-only mount). If empty, "/".
	Root string
	// Global is the global hooks.json (the agent-CLI's is
	// $HOME/.gemini/config/hooks.json, see DefaultGlobalFile). If empty,
	// none.
	Global string
	// Plugins are plugin directories: every DIR/*/hooks.json is loaded, its
	// groups named "plugin/group".
	Plugins []string
}

// DefaultGlobalFile is $HOME/.gemini/config/hooks.json, or "" when there
// is no home directory.
func DefaultGlobalFile() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, GlobalFile)
}

// SourceKind says what role a hooks.json plays.
type SourceKind string

const (
	SourceRoot      SourceKind = "root"
	SourceWorkspace SourceKind = "workspace"
	SourceGlobal    SourceKind = "global"
	SourcePlugin    SourceKind = "plugin"
)

// Source is one place where a hooks.json was looked for.
type Source struct {
	Path    string
	Kind    SourceKind
	Found   bool
	Dialect Dialect // of a found file; "" when it has no events
	// Plugin names the plugin of a plugin file.
	Plugin string
	// dir is where the file's commands run ("" for the main workspace).
	dir string
}

// HandlerType is "command", "http" or "policy".
type HandlerType string

const (
	CommandHandler HandlerType = "command"
	HTTPHandler    HandlerType = "http"
	// PolicyHandler decides pre-tool events in process with a policy file.
	PolicyHandler HandlerType = "policy"
)

// Hooks is the compiled content of the hooks.json files.
type Hooks struct {
	// Files are the hooks.json files that were found, root first.
	Files []string
	// Searched are the paths where hooks.json was looked for, root first.
	Searched []string
	// Sources are the places looked at, in load order, with their role.
	Sources []Source
	// RootFile is the authoritative file's path (found or not).
	RootFile string
	// Workspace is where command handlers run.
	Workspace string
	// Groups in run order: the root file's groups, then the workspace's,
	// each in file order. Groups shadowed by a root group are not here.
	Groups []*Group
}

// Group is a named hook group.
type Group struct {
	// Name is the group's name: its key in the file, prefixed with
	// "plugin/" for a plugin's group.
	Name string
	// Key is the group's key in its file.
	Key     string
	Enabled bool
	File    string
	Line    int
	// Dialect is the file's: Rules are keyed by its event names.
	Dialect Dialect
	// Source is the role of the file.
	Source SourceKind
	// Dir is where the group's commands run; "" for the main workspace.
	Dir   string
	Rules map[EventKind][]*Rule
}

// Rule is one {matcher, hooks} entry; for the agent-CLI events whose hooks
// are a plain list of handlers (SessionStart, PreInvocation,
// PostInvocation, Stop), one rule that matches everything.
type Rule struct {
	Matcher  *Matcher
	Handlers []*Handler
	Line     int
	Field    string // where it was declared, e.g. audit.post_tool_execution[0]
}

// Handler is one hook handler.
type Handler struct {
	Type    HandlerType
	Command string            // command handlers
	URL     string            // http handlers
	Headers map[string]string // http handlers: non-secret headers
	// PolicyFile is a policy handler's policy, an absolute path when Load
	// compiled it (relative ones are joined to the hooks.json's directory).
	PolicyFile string
	Timeout    time.Duration
	FailDeny   bool   // "on_failure": "deny"
	Field      string // where it was declared, e.g. audit.post_tool_execution[0].hooks[1]
	File       string
	Line       int
	// Invalid is non-empty when the handler's configuration is broken:
	// running it yields a spawn-error outcome with this text, so a broken
	// fail-closed handler still denies.
	Invalid string
	// policy is a policy handler's policy as Load read it; nil for a
	// handler built in code (the Runner loads it then).
	policy *loadedPolicy
}

// Name is a short identifier for logs: the command line or the URL.
func (h *Handler) Name() string {
	s := h.Command
	switch h.Type {
	case HTTPHandler:
		s = h.URL
	case PolicyHandler:
		s = "policy " + h.PolicyFile
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Load discovers and compiles the hooks.json files of opts (see
// LoadOptions for which, and their order). Missing files are fine (no
// hooks). Problems in the files are returned, not fatal: what can be used
// is used (an invalid matcher matches nothing, an invalid handler fails
// when run). The error is non-nil only when a file exists but cannot be
// read. The root file is authoritative: a group of another file with the
// name of a root group is ignored, so no other file can disable or
// replace it.
func Load(opts LoadOptions) (*Hooks, srcpos.Errors, error) {
	ws, err := workspaceDir(opts.Workspace)
	if err != nil {
		return nil, nil, err
	}
	root := opts.Root
	if root == "" {
		root = "/"
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, nil, fmt.Errorf("hooks: root: %w", err)
	}
	rootFile := filepath.Join(root, HooksFile)
	h := &Hooks{Workspace: ws, RootFile: rootFile}
	var problems srcpos.Errors
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		problems = append(problems, &srcpos.Error{
			Severity: srcpos.SeverityWarning, File: rootFile,
			Msg:  fmt.Sprintf("the root directory %s does not exist, so no root hooks.json is loaded", root),
			Hint: "check --root (the directory standing for /, whose .agents/hooks.json is authoritative)",
		})
	}
	sources, err := candidates(opts, rootFile, ws)
	if err != nil {
		return nil, problems, err
	}

	rootNames := map[string]bool{}
	policies := policyCache{} // each policy file is read once, however many handlers name it
	var seen []os.FileInfo
	for _, src := range sources {
		info, err := os.Stat(src.Path)
		if err == nil && slices.ContainsFunc(seen, func(o os.FileInfo) bool { return os.SameFile(o, info) }) {
			continue // the workspace is the root, or a file named twice: once
		}
		h.Searched = append(h.Searched, src.Path)
		if errors.Is(err, fs.ErrNotExist) {
			h.Sources = append(h.Sources, src)
			continue
		}
		data, rerr := os.ReadFile(src.Path)
		if rerr != nil {
			return nil, problems, fmt.Errorf("hooks: %w", rerr)
		}
		seen = append(seen, info)
		h.Files = append(h.Files, src.Path)
		dialect, groups, ps := compileFileDialect(src.Path, data, policies)
		problems = append(problems, ps...)
		src.Found, src.Dialect = true, dialect
		h.Sources = append(h.Sources, src)
		for _, g := range groups {
			g.Source, g.Dir = src.Kind, src.dir
			if src.Plugin != "" {
				g.Name = src.Plugin + "/" + g.Key
			}
			if src.Kind != SourceRoot && rootNames[g.Name] {
				problems = append(problems, &srcpos.Error{
					Severity: srcpos.SeverityWarning, File: src.Path, Line: g.Line, Field: g.Key,
					Msg:  fmt.Sprintf("group %q is defined in %s, which wins; this one is ignored", g.Name, rootFile),
					Hint: "rename the group to add hooks; the root file's groups cannot be replaced or disabled from any other file",
				})
				continue
			}
			if src.Kind == SourceRoot {
				rootNames[g.Name] = true
			}
			h.Groups = append(h.Groups, g)
		}
	}
	return h, problems, nil
}

func workspaceDir(ws string) (string, error) {
	if ws == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("hooks: workspace: %w", err)
		}
		ws = wd
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		return "", fmt.Errorf("hooks: workspace: %w", err)
	}
	return ws, nil
}

// candidates lists where hooks.json files are looked for, in load order.
func candidates(opts LoadOptions, rootFile, ws string) ([]Source, error) {
	srcs := []Source{
		{Path: rootFile, Kind: SourceRoot},
		{Path: filepath.Join(ws, HooksFile), Kind: SourceWorkspace},
	}
	for _, w := range opts.Workspaces {
		dir, err := workspaceDir(w)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, Source{Path: filepath.Join(dir, HooksFile), Kind: SourceWorkspace, dir: dir})
	}
	if opts.Global != "" {
		g, err := filepath.Abs(opts.Global)
		if err != nil {
			return nil, fmt.Errorf("hooks: global file: %w", err)
		}
		srcs = append(srcs, Source{Path: g, Kind: SourceGlobal})
	}
	for _, dir := range opts.Plugins {
		files, err := filepath.Glob(filepath.Join(dir, "*", PluginFile))
		if err != nil {
			return nil, fmt.Errorf("hooks: plugins %s: %w", dir, err)
		}
		slices.Sort(files)
		for _, f := range files {
			abs, err := filepath.Abs(f)
			if err != nil {
				return nil, fmt.Errorf("hooks: plugin: %w", err)
			}
			srcs = append(srcs, Source{Path: abs, Kind: SourcePlugin, Plugin: filepath.Base(filepath.Dir(abs))})
		}
	}
	return srcs, nil
}

// fileCompiler turns one file's JSON tree into groups, collecting problems.
type fileCompiler struct {
	path     string
	data     []byte
	problems srcpos.Errors
	// dialect is the file's, decided by its first event key.
	dialect Dialect
	// dialectAt is where that first event key is.
	dialectAt int64
	// policies are the policy files read so far by this Load.
	policies policyCache
}

func (c *fileCompiler) problem(sev srcpos.Severity, off int64, field, msg, hint string) {
	line, col := lineCol(c.data, off)
	c.problems = append(c.problems, &srcpos.Error{Severity: sev, File: c.path, Line: line, Column: col, Field: field, Msg: msg, Hint: hint})
}

func (c *fileCompiler) errorf(off int64, field, format string, args ...any) {
	c.problem(srcpos.SeverityError, off, field, fmt.Sprintf(format, args...), "")
}

// compileFile compiles one hooks.json.
func compileFile(path string, data []byte) ([]*Group, srcpos.Errors) {
	_, groups, problems := compileFileDialect(path, data, policyCache{})
	return groups, problems
}

// compileFileDialect compiles one hooks.json and says its dialect ("" when
// it names no event).
func compileFileDialect(path string, data []byte, policies policyCache) (Dialect, []*Group, srcpos.Errors) {
	c := &fileCompiler{path: path, data: data, policies: policies}
	groups := c.compile()
	return c.dialect, groups, c.problems
}

// eventDialect returns the dialect whose event key is key, or "".
func eventDialect(key string) Dialect {
	k, err := ParseEventKind(key)
	if err != nil {
		return ""
	}
	return k.Dialect()
}

// detectDialect sets the file's dialect from its first event key.
func (c *fileCompiler) detectDialect(root *node) {
	for _, g := range root.members {
		if g.val.kind != kindObject {
			continue
		}
		for _, f := range g.val.members {
			if d := eventDialect(f.key); d != "" {
				c.dialect, c.dialectAt = d, f.keyOff
				return
			}
		}
	}
}

func (c *fileCompiler) compile() []*Group {
	root, err := parseJSON(c.data)
	if err != nil {
		var pe *posError
		off := int64(0)
		if errors.As(err, &pe) {
			off = pe.off
		}
		c.problem(srcpos.SeverityError, off, "", err.Error()+"; the whole file is ignored", "")
		return nil
	}
	if root.kind != kindObject {
		c.errorf(root.off, "", "the top level must be an object of named groups, not %s; the whole file is ignored", root.kind)
		return nil
	}
	c.detectDialect(root)
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
	return groups
}

// groupFieldHint points a near-miss spelling of an event name at the
// right one; "" when it has none.
func groupFieldHint(key string) string {
	switch strings.ToLower(key) {
	case "pre_tool_use", "pretoolexecution", "pre-tool-execution":
		return `write "pre_tool_execution" (remote-sandbox dialect) or "PreToolUse" (agent-CLI dialect)`
	case "post_tool_use", "posttoolexecution", "post-tool-execution":
		return `write "post_tool_execution" (remote-sandbox dialect) or "PostToolUse" (agent-CLI dialect)`
	}
	for _, k := range EventKinds() {
		if strings.EqualFold(string(k), key) {
			return fmt.Sprintf("event names are case-sensitive: write %q", k)
		}
	}
	return ""
}

func (c *fileCompiler) group(m member) *Group {
	name := m.key
	g := &Group{Name: name, Key: name, Enabled: true, File: c.path, Dialect: c.dialect, Rules: map[EventKind][]*Rule{}}
	if g.Dialect == "" {
		g.Dialect = DialectRemote // no events at all: nothing runs either way
	}
	g.Line, _ = lineCol(c.data, m.keyOff)
	if name == "" {
		c.errorf(m.keyOff, `""`, "empty group name")
	}
	if m.val.kind != kindObject {
		hint := ""
		if name == "hooks" {
			hint = `hooks.json maps group names to {"PreToolUse": [...], ...} (agent-CLI dialect) or {"pre_tool_execution": [...], ...} (remote-sandbox dialect)`
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
		default:
			d := eventDialect(f.key)
			switch {
			case d == "":
				hint := groupFieldHint(f.key)
				if hint == "" {
					hint = suggest(f.key, c.groupFields()...)
				}
				c.problem(srcpos.SeverityError, f.keyOff, field, "unknown field", hint)
			case d != c.dialect:
				line, _ := lineCol(c.data, c.dialectAt)
				c.problem(srcpos.SeverityError, f.keyOff, field,
					fmt.Sprintf("an event of the %s dialect in a file of the %s dialect (its first event, line %d, decides); ignored", d, c.dialect, line),
					"one file holds one dialect: move these hooks to a file of their own, or use this file's event names")
			case EventKind(f.key).ruleBased():
				g.Rules[EventKind(f.key)] = c.rules(field, f.val)
			default:
				g.Rules[EventKind(f.key)] = c.handlerList(field, f.val)
			}
		}
	}
	if len(g.Rules) == 0 {
		c.problem(srcpos.SeverityWarning, m.keyOff, name, "group has no hooks for any event", "")
	}
	return g
}

// groupFields are the field names a group of this file may have.
func (c *fileCompiler) groupFields() []string {
	fields := []string{"enabled"}
	for _, k := range EventKinds() {
		if c.dialect == "" || k.Dialect() == c.dialect {
			fields = append(fields, string(k))
		}
	}
	return fields
}

// handlerList compiles an agent-CLI event whose hooks are a plain list of
// handlers into one rule that matches everything.
func (c *fileCompiler) handlerList(field string, n *node) []*Rule {
	if n.kind != kindArray {
		c.errorf(n.off, field, "must be a list of handlers, not %s", n.kind)
		return nil
	}
	r := &Rule{Matcher: compileMatcher(""), Field: field}
	r.Line, _ = lineCol(c.data, n.off)
	for i, hn := range n.arr {
		hf := fmt.Sprintf("%s[%d]", field, i)
		if hn.kind == kindObject {
			for _, f := range hn.members {
				switch f.key {
				case "matcher":
					c.problem(srcpos.SeverityWarning, f.keyOff, hf+".matcher", "ignored: this event has no tool to match", "")
				case "hooks":
					c.problem(srcpos.SeverityError, f.keyOff, hf+".hooks", "unknown field",
						"this event holds a list of handlers directly, not {\"matcher\", \"hooks\"} rules")
				}
			}
		}
		if h := c.handler(hf, hn, "matcher", "hooks"); h != nil {
			r.Handlers = append(r.Handlers, h)
		}
	}
	if len(r.Handlers) == 0 {
		c.problem(srcpos.SeverityWarning, n.off, field, "no handlers", "")
	}
	return []*Rule{r}
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
		r := &Rule{Matcher: compileMatcher(""), Field: rf}
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

// handler compiles one handler; skip names fields reported elsewhere.
func (c *fileCompiler) handler(field string, n *node, skip ...string) *Handler {
	if n.kind != kindObject {
		c.errorf(n.off, field, "a handler must be an object, not %s; handler ignored", n.kind)
		return nil
	}
	h := &Handler{Type: CommandHandler, Timeout: DefaultTimeout, Field: field, File: c.path}
	h.Line, _ = lineCol(c.data, n.off)
	var invalid []string
	fields := map[string]member{}
	for _, f := range n.members {
		if slices.Contains(skip, f.key) {
			continue
		}
		if _, dup := fields[f.key]; dup {
			c.errorf(f.keyOff, field+"."+f.key, "duplicate field; only the first is used")
			continue
		}
		fields[f.key] = f
	}
	// Type first: it decides which fields belong.
	typeNames := make([]string, 0, len(handlerTypes()))
	for _, t := range handlerTypes() {
		typeNames = append(typeNames, string(t))
	}
	if f, ok := fields["type"]; ok {
		_, known := kindOf(HandlerType(f.val.str))
		switch {
		case f.val.kind != kindString:
			c.errorf(f.val.off, field+".type", `must be %s, not %s`, quoteOr(typeNames), f.val.kind)
			invalid = append(invalid, "bad type")
		case known:
			h.Type = HandlerType(f.val.str)
		default:
			c.problem(srcpos.SeverityError, f.val.off, field+".type", fmt.Sprintf(`unknown handler type %q`, f.val.str), suggest(f.val.str, typeNames...))
			invalid = append(invalid, fmt.Sprintf("unknown handler type %q", f.val.str))
		}
	}
	allowed := map[string]bool{"type": true, "timeout": true, "on_failure": true}
	kind, _ := kindOf(h.Type)
	h.FailDeny = kind.failDeny
	for _, k := range kind.fields {
		allowed[k] = true
	}
	for _, f := range n.members {
		if slices.Contains(skip, f.key) || fields[f.key].keyOff != f.keyOff {
			continue // reported elsewhere, or a duplicate (reported)
		}
		ff := field + "." + f.key
		if !allowed[f.key] {
			hint := suggest(f.key, "type", "command", "url", "headers", "file", "timeout", "on_failure")
			if t, other := handlerKindOf(f.key); t != "" {
				hint = fmt.Sprintf("%s belong to \"type\": %q handlers", quoteAnd(other.fields), t)
				if len(other.fields) == 1 {
					hint = strings.Replace(hint, " belong ", " belongs ", 1)
				}
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
		case "file":
			if !c.policyFile(h, ff, f.val) {
				invalid = append(invalid, "no policy file")
			}
		case "timeout":
			d, ok := c.timeout(ff, f.val)
			if ok {
				h.Timeout = d
			}
		case "on_failure":
			switch {
			case f.val.kind == kindString && f.val.str == "allow":
				h.FailDeny = false
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
	if req := kind.required; req != "" {
		if _, ok := fields[req]; !ok {
			c.errorf(n.off, field, "%s handler without %q", h.Type, req)
			invalid = append(invalid, "no "+req)
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

// quoteOr writes "a", "b" or "c".
func quoteOr(names []string) string { return quoteJoin(names, " or ") }

// quoteAnd writes "a", "b" and "c".
func quoteAnd(names []string) string { return quoteJoin(names, " and ") }

func quoteJoin(names []string, last string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + last + q[len(q)-1]
}

// suggest returns `did you mean "x"?` for the closest candidate within a
// small edit distance, or "".
func suggest(got string, candidates ...string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(got), strings.ToLower(c)); d < bestD {
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
