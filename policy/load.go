package policy

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"gopkg.in/yaml.v3"

	"github.com/hookgate/hookgate/internal/srcpos"
	"github.com/hookgate/hookgate/internal/yamldoc"
)

// Limits on a policy file. A real one is a few kilobytes; these stop a
// hostile or mistaken file from costing memory or time at load.
const (
	MaxFileSize = 4 << 20
	// maxNodes caps the YAML nodes walked, aliases expanded.
	maxNodes = 1_000_000
)

// Approver timeouts: the default, and the longest accepted. The hook that
// calls the decision service must wait longer than this, or the agent's
// runtime gives up first (and a remote sandbox then allows).
const (
	DefaultApproverTimeout = 20 * time.Second
	MaxApproverTimeout     = 5 * time.Minute
)

const (
	tagStr  = "!!str"
	tagNull = "!!null"
)

// Load reads and compiles a policy file. Problems in the file come back as
// srcpos.Errors, every one of them, each "file:line: field: message".
func Load(file string) (*Policy, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, srcpos.Errors{{File: file, Msg: fmt.Sprintf("cannot read: %v", unwrapPath(err))}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, srcpos.Errors{{File: file, Msg: fmt.Sprintf("cannot read: %v", err)}}
	}
	return Parse(file, data)
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse compiles a policy from data; file names it in errors and decisions.
// A file named *.json, or text starting with { or [, is JSON, which is also
// YAML: its syntax errors are reported in JSON's terms.
func Parse(file string, data []byte) (*Policy, error) {
	if len(data) > MaxFileSize {
		return nil, srcpos.Errors{{File: file, Msg: fmt.Sprintf("larger than %d MiB; a policy file that big is refused", MaxFileSize>>20)}}
	}
	root, errs := parseTree(file, data)
	if errs != nil {
		return nil, errs
	}
	env, err := newCELEnv()
	if err != nil {
		return nil, fmt.Errorf("policy: the CEL environment: %w", err)
	}
	l := &loader{file: file, env: env, p: &Policy{file: file, fallback: Allow, approverTimeout: DefaultApproverTimeout}}
	l.top(root)
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	l.index()
	return l.p, nil
}

// parseTree reads the file as one YAML (or JSON) document; an empty one is
// refused rather than read as allow-all.
func parseTree(file string, data []byte) (*yaml.Node, srcpos.Errors) {
	root, errs := yamldoc.Parse(file, data)
	if errs != nil {
		return nil, errs
	}
	if root.Kind == 0 {
		return nil, srcpos.Errors{{File: file, Msg: "the file is empty", Hint: "write rules: and/or presets:; an empty policy is refused rather than read as allow-all"}}
	}
	return root, nil
}

// loader walks the YAML tree, collecting every problem.
type loader struct {
	file  string
	env   *cel.Env
	p     *Policy
	errs  srcpos.Errors
	nodes int
	order int
}

func (l *loader) errf(n *yaml.Node, field, hint, format string, args ...any) {
	e := &srcpos.Error{File: l.file, Field: field, Msg: fmt.Sprintf(format, args...), Hint: hint}
	if n != nil {
		e.Line = n.Line
	}
	l.errs = append(l.errs, e)
}

// resolve follows aliases and counts the node, so that an alias bomb stops
// at maxNodes rather than expanding.
func (l *loader) resolve(n *yaml.Node) (*yaml.Node, bool) {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	if n.Kind == yaml.AliasNode {
		l.errf(n, "", "", "an alias that never ends")
		return nil, false
	}
	l.nodes++
	if l.nodes == maxNodes+1 {
		l.errf(n, "", "write the policy out without YAML aliases", "too many values (over %d, aliases expanded)", maxNodes)
	}
	return n, l.nodes <= maxNodes
}

// pairs checks a mapping's keys: each a string, each once, each known, and
// calls visit for each known one.
func (l *loader) pairs(n *yaml.Node, field string, known []string, visit func(key string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, ok := l.resolve(n.Content[i])
		if !ok {
			return
		}
		key := k.Value
		kf := join(field, key)
		if k.Kind != yaml.ScalarNode {
			l.errf(k, field, "", "a key must be a plain name, not %s", describe(k))
			continue
		}
		if first, dup := seen[key]; dup {
			l.errf(k, kf, "keep one", "set twice (first on line %d)", first)
			continue
		}
		seen[key] = k.Line
		if !slices.Contains(known, key) {
			l.errf(k, kf, "known fields here: "+strings.Join(known, ", "), "unknown field")
			continue
		}
		visit(key, k, n.Content[i+1])
	}
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func (l *loader) top(doc *yaml.Node) {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			l.errf(n, "", "", "the file is empty")
			return
		}
		n = n.Content[0]
	}
	n, ok := l.resolve(n)
	if !ok {
		return
	}
	if n.Kind != yaml.MappingNode {
		l.errf(n, "(top level)", "start with default:, rules: or presets:", "must be a mapping (key: value), not %s", describe(n))
		return
	}
	var hasRules bool
	var rules, presets *yaml.Node
	l.pairs(n, "", []string{"default", "rules", "presets", "approver", "approver_timeout"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "default":
			l.fallback(v)
		case "rules":
			rules, hasRules = v, true
		case "presets":
			presets, hasRules = v, true
		case "approver":
			l.approver(v)
		case "approver_timeout":
			l.approverTimeout(v)
		}
	})
	if !hasRules && len(l.errs) == 0 {
		l.errf(n, "(top level)", "add rules: or presets: (allow_all, if allowing everything is really meant)", "no rules and no presets")
	}
	// Presets after rules: a user's rule comes first within its level.
	if rules != nil {
		l.forEach(rules, "rules", "- deny: tool_name", l.rule)
	}
	if presets != nil {
		l.forEach(presets, "presets", "- confirm_run_command", l.preset)
	}
}

// forEach walks a list; null counts as empty.
func (l *loader) forEach(n *yaml.Node, field, example string, visit func(n *yaml.Node, field string)) {
	n, ok := l.resolve(n)
	if !ok || isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		l.errf(n, field, fmt.Sprintf("write each item on its own line as %q", example), "must be a list, not %s", describe(n))
		return
	}
	for i, item := range n.Content {
		item, ok := l.resolve(item)
		if !ok {
			return
		}
		visit(item, fmt.Sprintf("%s[%d]", field, i))
	}
}

// str reads a string value; ok false (and reported) otherwise.
func (l *loader) str(n *yaml.Node, field string) (string, bool) {
	n, ok := l.resolve(n)
	if !ok {
		return "", false
	}
	switch {
	case n.Kind != yaml.ScalarNode:
		l.errf(n, field, "", "must be a string, not %s", describe(n))
	case n.Tag == tagNull:
		l.errf(n, field, "give a value or remove the line", "is empty")
	case n.Tag != tagStr:
		l.errf(n, field, fmt.Sprintf("quote it: %q", n.Value), "must be a string, but %s is read as %s", n.Value, describe(n))
	case n.Style == 0 && isYAML11Bool(n.Value):
		l.errf(n, field, fmt.Sprintf("quote it if you mean the string: %q", n.Value), "%s is a boolean to some YAML readers", n.Value)
	default:
		return n.Value, true
	}
	return "", false
}

func (l *loader) fallback(v *yaml.Node) {
	s, ok := l.str(v, "default")
	if !ok {
		return
	}
	switch Action(s) {
	case Allow, Deny:
		l.p.fallback = Action(s)
	default:
		l.errf(v, "default", "write default: allow or default: deny (an ask needs a rule: - ask: \"*\")", "must be allow or deny, not %q", s)
	}
}

func (l *loader) approver(v *yaml.Node) {
	s, ok := l.str(v, "approver")
	if !ok {
		return
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		l.errf(v, "approver", "write an https:// URL such as https://approvals.example.com/v1/decide (the gateway adds its credentials)",
			"must be an https URL without credentials, not %q", s)
		return
	}
	l.p.approver = s
}

func (l *loader) approverTimeout(v *yaml.Node) {
	v, ok := l.resolve(v)
	if !ok {
		return
	}
	if v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
		l.errf(v, "approver_timeout", fmt.Sprintf("did you mean %q?", v.Value+"s"), "%q has no unit", v.Value)
		return
	}
	s, ok := l.str(v, "approver_timeout")
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxApproverTimeout {
		l.errf(v, "approver_timeout", "write a duration such as 20s or 1m", "must be a duration above 0 and at most %s, not %q", MaxApproverTimeout, s)
		return
	}
	l.p.approverTimeout = d
}

// rule compiles one entry of rules.
func (l *loader) rule(n *yaml.Node, field string) {
	if n.Kind != yaml.MappingNode {
		hint := "write it as - deny: tool_name (or ask:, allow:), with when: and reason: if needed"
		l.errf(n, field, hint, "a rule must be a mapping, not %s", describe(n))
		return
	}
	r := &rule{ref: Rule{File: l.file, Line: n.Line, Source: field}}
	var target *yaml.Node
	var decisions []string
	l.pairs(n, field, []string{"deny", "ask", "allow", "when", "reason"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "deny", "ask", "allow":
			decisions = append(decisions, key)
			r.action, target = Action(key), v
		case "when":
			if src, ok := l.str(v, join(field, "when")); ok {
				r.when = l.compile(v, join(field, "when"), src)
			}
		case "reason":
			r.reason, _ = l.str(v, join(field, "reason"))
		}
	})
	switch len(decisions) {
	case 0:
		l.errf(n, field, "add deny: NAME, ask: NAME or allow: NAME", "a rule needs a decision")
		return
	case 1:
	default:
		l.errf(n, field, "split it into one rule per decision", "a rule takes one decision, not %s", strings.Join(decisions, " and "))
		return
	}
	if l.target(r, target, join(field, string(r.action))) {
		l.add(r)
	}
}

// target reads what a rule names: "*", a tool, a list of tools, or
// {prefix: P} / {prefix: P, tools: [...]} (the tools being P + each name).
func (l *loader) target(r *rule, v *yaml.Node, field string) bool {
	v, ok := l.resolve(v)
	if !ok {
		return false
	}
	if isNull(v) {
		l.errf(v, field, `name a tool, a list of tools, "*" or {prefix: "mcp__server__"}`, "is empty")
		return false
	}
	switch v.Kind {
	case yaml.ScalarNode:
		name, ok := l.str(v, field)
		if !ok {
			return false
		}
		if name == "*" {
			r.spec = SpecAny
			return true
		}
		r.spec, r.tools = SpecTool, []string{name}
		return l.toolName(v, field, name)
	case yaml.SequenceNode:
		r.spec = SpecTool
		return l.toolList(v, field, "", &r.tools)
	case yaml.MappingNode:
		return l.prefixTarget(r, v, field)
	}
	l.errf(v, field, `name a tool, a list of tools, "*" or {prefix: "mcp__server__"}`, "cannot be %s", describe(v))
	return false
}

func (l *loader) prefixTarget(r *rule, v *yaml.Node, field string) bool {
	var prefix string
	var tools *yaml.Node
	good := true
	l.pairs(v, field, []string{"prefix", "tools"}, func(key string, k, val *yaml.Node) {
		switch key {
		case "prefix":
			var ok bool
			prefix, ok = l.str(val, join(field, "prefix"))
			good = good && ok
			if ok && (prefix == "" || strings.Contains(prefix, "*")) {
				l.errf(val, join(field, "prefix"), `write the literal start of the names, e.g. "mcp__github__"`, "must be a non-empty name start without *, not %q", prefix)
				good = false
			}
		case "tools":
			tools = val
		}
	})
	if prefix == "" {
		if good {
			l.errf(v, field, `add prefix: "mcp__server__"`, "a mapping here needs prefix:")
		}
		return false
	}
	if tools == nil {
		r.spec, r.prefix = SpecPrefix, prefix
		return good
	}
	r.spec = SpecTool
	return l.toolList(tools, join(field, "tools"), prefix, &r.tools) && good
}

func (l *loader) toolList(v *yaml.Node, field, prefix string, into *[]string) bool {
	v, ok := l.resolve(v)
	if !ok {
		return false
	}
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		what := describe(v)
		if v.Kind == yaml.SequenceNode {
			what = "an empty list"
		}
		l.errf(v, field, "write [name, other_name]", "must be a non-empty list of tool names, not %s", what)
		return false
	}
	good := true
	seen := map[string]bool{}
	for i, item := range v.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		name, ok := l.str(item, f)
		switch {
		case !ok:
			good = false
		case name == "*":
			l.errf(item, f, `write "*" alone as the rule's target`, `"*" cannot be one name of a list`)
			good = false
		case !l.toolName(item, f, name):
			good = false
		case seen[name]:
			l.errf(item, f, "remove the repeat", "%q is listed twice", name)
			good = false
		default:
			seen[name] = true
			*into = append(*into, prefix+name)
		}
	}
	return good
}

// toolName accepts a literal tool name: no patterns, no spaces.
func (l *loader) toolName(n *yaml.Node, field, name string) bool {
	switch {
	case name == "":
		l.errf(n, field, "name a tool", "is empty")
	case strings.Contains(name, "*"):
		l.errf(n, field, `for every tool of one server write {prefix: "mcp__server__"}; "*" alone means every tool`, "%q is not a tool name: patterns are not matched", name)
	case strings.ContainsAny(name, "|()^$"):
		l.errf(n, field, "write several tools as a list: [read_file, write_file]", "%q is not a tool name: rules match names exactly, not as regular expressions", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		l.errf(n, field, "", "%q is not a tool name: it holds a space or control character", name)
	default:
		return true
	}
	return false
}

// compile turns a `when` into a program, reporting CEL's errors at their
// line in the file.
func (l *loader) compile(n *yaml.Node, field, src string) predicate {
	if len(src) > maxWhenLen {
		l.errf(n, field, "split the condition over several rules", "longer than %d bytes", maxWhenLen)
		return nil
	}
	ast, iss := l.env.Compile(src)
	if iss.Err() != nil {
		for _, e := range iss.Errors() {
			line := n.Line + max(e.Location.Line()-1, 0)
			if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				line++ // a block scalar starts on the line after its indicator
			}
			l.errs = append(l.errs, &srcpos.Error{File: l.file, Line: line, Field: field,
				Msg:  fmt.Sprintf("CEL: %s (column %d of the expression)", strings.TrimSuffix(e.Message, " (in container '')"), e.Location.Column()+1),
				Hint: "variables are tool, args and event; functions beyond CEL's: path.within(p, [roots]), path.clean(p), s.glob(pattern)"})
		}
		return nil
	}
	out := ast.OutputType()
	if !out.IsExactType(types.BoolType) && out.Kind() != types.DynKind {
		l.errf(n, field, "compare it, e.g. args.Overwrite == true", "must give true or false, but gives %s", out)
		return nil
	}
	if problems := checkLiterals(ast); len(problems) > 0 {
		for _, p := range problems {
			l.errf(n, field, "", "%s", p)
		}
		return nil
	}
	prg, err := l.env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(MaxCost))
	if err != nil {
		l.errf(n, field, "", "CEL: %v", err)
		return nil
	}
	return &celPredicate{src: src, prg: prg}
}

// add files a compiled rule.
func (l *loader) add(r *rule) {
	r.ref.Level = levelOf(r.spec, r.action)
	r.order = l.order
	l.order++
	l.p.rules = append(l.p.rules, r)
}

// index sorts the rules by level then file order and files them by what
// they name, so a decision looks only at the rules that can match.
func (l *loader) index() {
	p := l.p
	slices.SortStableFunc(p.rules, byLevelThenOrder)
	p.byTool = map[string][]*rule{}
	p.byPrefix = map[string][]*rule{}
	for _, r := range p.rules {
		switch r.spec {
		case SpecTool:
			for _, t := range r.tools {
				p.byTool[t] = append(p.byTool[t], r)
			}
		case SpecPrefix:
			if _, ok := p.byPrefix[r.prefix]; !ok {
				p.prefixLens = append(p.prefixLens, len(r.prefix))
			}
			p.byPrefix[r.prefix] = append(p.byPrefix[r.prefix], r)
		case SpecAny:
			p.anyTool = append(p.anyTool, r)
		}
	}
	slices.Sort(p.prefixLens)
	p.prefixLens = slices.Compact(p.prefixLens)
}

// describe names what a node is read as, for messages.
func describe(n *yaml.Node) string { return yamldoc.Describe(n) }

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == tagNull }

// isYAML11Bool: words YAML 1.1 readers take for booleans (yaml.v3 does not).
func isYAML11Bool(s string) bool {
	switch strings.ToLower(s) {
	case "yes", "no", "on", "off", "y", "n":
		return true
	}
	return false
}
