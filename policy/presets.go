package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The tool vocabularies of the two agent runtimes, by what a tool does.
// A remote sandbox names its tools code_execution, read_file, write_file,
// list_files and delete_file, with the path in "path"; a CLI agent names
// them run_command, view_file, write_to_file, ... with the path in an
// argument of its own per tool.

// execTools run commands or code.
func execTools() []string { return []string{"code_execution", "run_command"} }

// readTools only read (files, directories, searches).
func readTools() []string {
	return []string{"read_file", "list_files", "view_file", "list_dir", "find_by_name", "grep_search"}
}

// writeTools change files.
func writeTools() []string {
	return []string{"write_file", "delete_file", "write_to_file", "replace_file_content", "multi_replace_file_content"}
}

// WriteAndExecTools are the tools of both vocabularies that change files
// or run commands or code: the ones a pre-tool gate must cover.
func WriteAndExecTools() []string { return append(writeTools(), execTools()...) }

// fileTools are the tools that touch one path, and the argument holding
// it.
func fileTools() []struct{ tool, field string } {
	return []struct{ tool, field string }{
		{"read_file", "path"},
		{"write_file", "path"},
		{"list_files", "path"},
		{"delete_file", "path"},
		{"view_file", "AbsolutePath"},
		{"write_to_file", "TargetFile"},
		{"replace_file_content", "TargetFile"},
		{"multi_replace_file_content", "TargetFile"},
		{"list_dir", "DirectoryPath"},
		{"find_by_name", "SearchDirectory"},
		{"grep_search", "SearchPath"},
	}
}

// presetNames are the presets a file may name.
func presetNames() []string {
	return []string{"confirm_run_command", "safe_defaults", "workspace_only", "deny_all", "allow_all"}
}

// preset expands one entry of presets: a name, or {name: {options}}.
func (l *loader) preset(n *yaml.Node, field string) {
	var name string
	var opts *yaml.Node
	switch {
	case n.Kind == yaml.ScalarNode:
		var ok bool
		if name, ok = l.str(n, field); !ok {
			return
		}
	case n.Kind == yaml.MappingNode && len(n.Content) == 2:
		k, ok := l.resolve(n.Content[0])
		if !ok {
			return
		}
		name, opts = k.Value, n.Content[1]
	default:
		l.errf(n, field, "write a name (- safe_defaults) or a name with options (- workspace_only: {paths: [/workspace]})",
			"a preset must be a name or a one-key mapping, not %s", describe(n))
		return
	}
	known := presetNames()
	if !slices.Contains(known, name) {
		hint := "known presets: " + strings.Join(known, ", ")
		for _, k := range known {
			if len(name) >= 4 && (strings.HasPrefix(k, name) || strings.HasPrefix(name, k)) {
				hint = fmt.Sprintf("did you mean %s? %s", k, hint)
				break
			}
		}
		l.errf(n, field, hint, "unknown preset %q", name)
		return
	}
	src := Rule{File: l.file, Line: n.Line, Source: field + " " + name}
	if name == "workspace_only" {
		l.workspaceOnly(n, opts, field, src)
		return
	}
	if opts != nil {
		if o, ok := l.resolve(opts); ok && !isNull(o) && !(o.Kind == yaml.MappingNode && len(o.Content) == 0) {
			l.errf(o, join(field, name), "write - "+name, "takes no options")
			return
		}
	}
	for _, r := range presetRules(name) {
		r.ref = src
		l.add(r)
	}
}

// presetRules are the rules of the presets without options.
func presetRules(name string) []*rule {
	tools := func(a Action, names []string, reason string) *rule {
		return &rule{action: a, spec: SpecTool, tools: names, reason: reason}
	}
	every := func(a Action) *rule { return &rule{action: a, spec: SpecAny} }
	switch name {
	case "confirm_run_command":
		return []*rule{tools(Deny, execTools(), "command execution is not allowed by this policy (preset confirm_run_command)"), every(Allow)}
	case "safe_defaults":
		return []*rule{
			tools(Allow, readTools(), ""),
			tools(Ask, WriteAndExecTools(), "writes and command execution need approval (preset safe_defaults)"),
			// A tool the preset does not know could do anything: it asks too.
			{action: Ask, spec: SpecAny, reason: "tools outside the read-only set need approval (preset safe_defaults)"},
		}
	case "deny_all":
		return []*rule{{action: Deny, spec: SpecAny, reason: "every tool is denied by this policy (preset deny_all)"}}
	case "allow_all":
		return []*rule{every(Allow)}
	}
	return nil
}

// workspaceOnly denies each file tool whose path argument is missing or
// outside the given roots.
func (l *loader) workspaceOnly(n, opts *yaml.Node, field string, src Rule) {
	f := join(field, "workspace_only")
	hint := "write - workspace_only: {paths: [/workspace]}"
	if opts == nil {
		l.errf(n, field, hint, "workspace_only needs the paths it allows")
		return
	}
	o, ok := l.resolve(opts)
	if !ok {
		return
	}
	if o.Kind != yaml.MappingNode {
		l.errf(o, f, hint, "must be a mapping with paths:, not %s", describe(o))
		return
	}
	var roots []string
	good := true
	l.pairs(o, f, []string{"paths"}, func(_ string, _, v *yaml.Node) {
		var list []string
		if !l.toolListRaw(v, join(f, "paths"), &list) {
			good = false
			return
		}
		for i, p := range list {
			if !strings.HasPrefix(p, "/") || path.Clean(p) == "/" {
				l.errf(v, fmt.Sprintf("%s.paths[%d]", f, i), "give absolute directories such as /workspace", "%q is not an absolute directory below /", p)
				good = false
			}
			roots = append(roots, path.Clean(p))
		}
	})
	if !good {
		return
	}
	if len(roots) == 0 {
		l.errf(o, f, hint, "needs paths:")
		return
	}
	for _, ft := range fileTools() {
		l.add(&rule{ref: src, action: Deny, spec: SpecTool, tools: []string{ft.tool},
			when:   &workspacePredicate{field: ft.field, roots: roots},
			reason: fmt.Sprintf("%s may only touch paths inside %s (preset workspace_only)", ft.tool, strings.Join(roots, ", "))})
	}
}

// toolListRaw reads a non-empty list of strings.
func (l *loader) toolListRaw(v *yaml.Node, field string, into *[]string) bool {
	v, ok := l.resolve(v)
	if !ok {
		return false
	}
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		l.errf(v, field, "write [/workspace]", "must be a non-empty list, not %s", describe(v))
		return false
	}
	good := true
	for i, item := range v.Content {
		s, ok := l.str(item, fmt.Sprintf("%s[%d]", field, i))
		good = good && ok
		*into = append(*into, s)
	}
	return good
}
