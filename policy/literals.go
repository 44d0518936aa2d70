package policy

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// checkLiterals finds the mistakes in a predicate's constant arguments
// that would otherwise show only when a call comes: a glob pattern that
// does not parse, a path.within root that is not absolute (and so would
// contain nothing).
func checkLiterals(ast *cel.Ast) []string {
	var problems []string
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind {
			return
		}
		call := e.AsCall()
		args := call.Args()
		switch call.FunctionName() {
		case "glob":
			if len(args) == 1 {
				if pattern, ok := literalString(args[0]); ok {
					if _, err := Glob(pattern, ""); err != nil {
						problems = append(problems, "glob: "+err.Error())
					}
				}
			}
		case "path.within":
			if len(args) != 2 {
				return
			}
			roots := []celast.Expr{args[1]}
			if args[1].Kind() == celast.ListKind {
				roots = args[1].AsList().Elements()
			}
			for _, r := range roots {
				if root, ok := literalString(r); ok && !strings.HasPrefix(root, "/") {
					problems = append(problems, fmt.Sprintf("path.within: the root %q is not an absolute path, so nothing is within it", root))
				}
			}
		}
	}))
	return problems
}

func literalString(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}
