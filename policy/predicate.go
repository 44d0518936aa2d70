package policy

import (
	"errors"
	"fmt"
	"path"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// MaxCost is CEL's cost budget for one evaluation of one predicate (CEL's
// own unit, about one per operation and per few bytes of a string it
// scans): far above any honest predicate, far below what would stall a
// decision. A predicate over budget errors, which denies.
const MaxCost = 1_000_000

// maxWhenLen caps the text of one predicate.
const maxWhenLen = 16 << 10

// predicate is a rule's `when`: a compiled CEL program, or a check written
// in Go for the presets.
type predicate interface {
	eval(*activation) (bool, error)
	text() string
}

// activation hands the three variables to CEL without building a map per
// evaluation.
type activation struct {
	in    Input
	args  map[string]any
	event map[string]any
}

func newActivation(in Input) *activation {
	a := &activation{in: in, args: in.Args, event: in.Event}
	if a.args == nil {
		a.args = map[string]any{}
	}
	if a.event == nil {
		a.event = map[string]any{}
	}
	return a
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "tool":
		return a.in.Tool, true
	case "args":
		return a.args, true
	case "event":
		return a.event, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// celPredicate is a compiled `when`.
type celPredicate struct {
	src string
	prg cel.Program
}

func (p *celPredicate) text() string { return p.src }

func (p *celPredicate) eval(a *activation) (bool, error) {
	out, _, err := p.prg.Eval(a)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the predicate gave %s, not true or false", out.Type().TypeName())
	}
	return bool(b), nil
}

// newCELEnv declares the variables and the functions a predicate may use.
func newCELEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(maxWhenLen),
		cel.Function("path.within",
			cel.Overload("path_within_string_list", []*cel.Type{cel.StringType, cel.ListType(cel.StringType)}, cel.BoolType,
				cel.BinaryBinding(celWithinList)),
			cel.Overload("path_within_string_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(p, root ref.Val) ref.Val {
					ps, ok1 := p.(types.String)
					rs, ok2 := root.(types.String)
					if !ok1 || !ok2 {
						return types.MaybeNoSuchOverloadErr(p)
					}
					return types.Bool(Within(string(ps), []string{string(rs)}))
				}))),
		cel.Function("path.clean",
			cel.Overload("path_clean_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(p ref.Val) ref.Val {
					ps, ok := p.(types.String)
					if !ok {
						return types.MaybeNoSuchOverloadErr(p)
					}
					return types.String(path.Clean(string(ps)))
				}))),
		cel.Function("glob",
			cel.MemberOverload("string_glob_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(s, pattern ref.Val) ref.Val {
					ss, ok1 := s.(types.String)
					ps, ok2 := pattern.(types.String)
					if !ok1 || !ok2 {
						return types.MaybeNoSuchOverloadErr(s)
					}
					ok, err := Glob(string(ps), string(ss))
					if err != nil {
						return types.NewErr("glob: %v", err)
					}
					return types.Bool(ok)
				}))),
	)
}

func celWithinList(p, roots ref.Val) ref.Val {
	ps, ok := p.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(p)
	}
	native, err := roots.ConvertToNative(reflect.TypeOf([]string(nil)))
	if err != nil {
		return types.NewErr("path.within: the roots must be a list of strings: %v", err)
	}
	return types.Bool(Within(string(ps), native.([]string)))
}

// Within reports whether p lies inside one of roots, judged on the text of
// the paths: both are cleaned first (so "/workspace/a/../../etc" is /etc),
// a root contains itself and what lies under it on a path boundary (so
// /workspace does not contain /workspace-evil), and a path that is not
// absolute, or holds a NUL byte, is inside nothing. Symbolic links are not
// followed: the deciding process may not even see the sandbox's disk.
func Within(p string, roots []string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	clean := path.Clean(p)
	for _, root := range roots {
		if !strings.HasPrefix(root, "/") || strings.ContainsRune(root, 0) {
			continue
		}
		r := path.Clean(root)
		if r == "/" || clean == r || strings.HasPrefix(clean, r+"/") {
			return true
		}
	}
	return false
}

// maxGlobWork bounds the table Glob fills (pattern segments × name
// segments).
const maxGlobWork = 1 << 16

// Glob reports whether name matches pattern, segment by segment between
// slashes: a segment "**" matches any number of whole segments (none
// included), and any other segment is matched as by path.Match (*, ?,
// [classes]; a * never crosses a slash).
func Glob(pattern, name string) (bool, error) {
	ps := strings.Split(pattern, "/")
	ns := strings.Split(name, "/")
	for _, s := range ps {
		if s == "**" {
			continue
		}
		if _, err := path.Match(s, ""); err != nil {
			return false, fmt.Errorf("bad pattern %q: %w", pattern, err)
		}
	}
	if (len(ps)+1)*(len(ns)+1) > maxGlobWork {
		return false, errors.New("pattern and name have too many segments")
	}
	// match[i][j]: ps[i:] matches ns[j:], filled from the end.
	width := len(ns) + 1
	match := make([]bool, (len(ps)+1)*width)
	match[len(ps)*width+len(ns)] = true
	for i := len(ps) - 1; i >= 0; i-- {
		for j := len(ns); j >= 0; j-- {
			if ps[i] == "**" {
				match[i*width+j] = match[(i+1)*width+j] || (j < len(ns) && match[i*width+j+1])
				continue
			}
			if j < len(ns) {
				ok, _ := path.Match(ps[i], ns[j])
				match[i*width+j] = ok && match[(i+1)*width+j+1]
			}
		}
	}
	return match[0], nil
}

// workspacePredicate is workspace_only's check of one tool: the argument
// holding the path is present, a string, and within the roots.
type workspacePredicate struct {
	field string
	roots []string
}

func (w *workspacePredicate) text() string {
	return fmt.Sprintf("!path.within(args.%s, %q)", w.field, w.roots)
}

// eval is true (the deny applies) when the path is missing or outside.
func (w *workspacePredicate) eval(a *activation) (bool, error) {
	p, ok := a.args[w.field].(string)
	return !ok || !Within(p, w.roots), nil
}
