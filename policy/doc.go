// Package policy is the declarative tool policy: one file of deny / ask /
// allow rules on tool names that answers every pre-tool gate the same way,
// whoever asks (a remote sandbox's HTTP hook, a CLI agent's hook, a Go
// runtime in process).
//
// A rule names a tool (or a list of tools), a prefix (every tool of one MCP
// server) or "*", and may carry a `when` predicate written in CEL. Rules fall
// into nine levels, specificity × decision:
//
//	tool   deny 0, ask 1, allow 2
//	prefix deny 3, ask 4, allow 5
//	"*"    deny 6, ask 7, allow 8
//
// Decide walks the levels from 0 to 8, rules of one level in file order; a
// rule whose predicate is false is skipped and the first rule that matches
// decides. No match gives the file's default (allow unless it says deny).
// Anything that goes wrong while evaluating — a predicate that errors at run
// time, a field it needs that the call lacks, a predicate over its cost
// budget — denies, with the error as the reason: a policy never fails open.
//
// Load checks a file strictly (unknown fields, wrong types, bad CEL, unknown
// presets) and reports every problem as "file:line: field: message" with a
// fix, through internal/srcpos like the gateway's other files. A loaded
// Policy is immutable and safe for concurrent use; reloading means loading
// again and swapping the pointer.
package policy
