package hooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/internal/srcpos"
)

// DefaultKillGrace is how long a timed-out command's process group has
// between SIGTERM and SIGKILL.
const DefaultKillGrace = 500 * time.Millisecond

// Log field names of the per-handler line, defined once.
const (
	fieldEvent       = "event"
	fieldEventID     = "event_id"
	fieldTool        = "tool"
	fieldGroup       = "group"
	fieldHandler     = "handler"
	fieldHandlerType = "handler_type"
	fieldOutcome     = "outcome"
	fieldEffect      = "effect"
	fieldDetail      = "detail"
	fieldDuration    = "duration_ms"
	fieldStderr      = "stderr"
	fieldAttempts    = "attempts"
	fieldStatus      = "status"
	fieldSource      = "source"
	fieldDialect     = "dialect"
	fieldApprover    = "approver"
)

// RunnerOptions configure a Runner. Every field is optional.
type RunnerOptions struct {
	// Logger receives one line per handler run. If zero, nothing is logged.
	Logger zerolog.Logger
	// HTTP delivers http handlers' events. If nil, http handlers fail with
	// a spawn-error outcome.
	HTTP *hookhttp.Client
	// Deadline bounds a whole Run (every handler of the event). If zero,
	// only each handler's own timeout applies.
	Deadline time.Duration
	// Env is the environment of command handlers. If nil, os.Environ().
	Env []string
	// KillGrace is the time between SIGTERM and SIGKILL for a timed-out
	// command. If zero, DefaultKillGrace.
	KillGrace time.Duration
	// LoadProblems are what Load reported. Every Run logs each error among
	// them as a line of its own (outcome load-error, at error level), so a
	// hooks.json that did not load never passes silently. If nil, none.
	LoadProblems srcpos.Errors
	// FailClosedOnLoadError makes a pre event deny when LoadProblems hold an
	// error: the hooks that were meant to run may be missing. If false, such
	// a run allows (fail-open), as a failed handler does by default.
	FailClosedOnLoadError bool
}

// Runner runs the hooks of events. It is safe for concurrent use.
type Runner struct {
	hooks *Hooks
	opts  RunnerOptions
	// matches caches, per event kind and tool name, the rules that apply
	// (tool names are few; the cache is bounded all the same).
	matches    sync.Map // matchKey -> []match
	matchCount atomic.Int32
	// policies caches the policy files of handlers built in code, by path
	// (Load gives its handlers their policy already).
	policies sync.Map // string -> *loadedPolicy
}

// maxCachedTools bounds the match cache: tool names come from the agent,
// so a runaway agent cannot grow it without limit.
const maxCachedTools = 1024

type matchKey struct {
	kind EventKind
	tool string
}

type match struct {
	group *Group
	rule  *Rule
}

// NewRunner returns a Runner for h.
func NewRunner(h *Hooks, opts RunnerOptions) *Runner {
	if h == nil {
		h = &Hooks{}
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	return &Runner{hooks: h, opts: opts}
}

// Result is what one handler did.
type Result struct {
	Group    string
	Handler  *Handler
	Outcome  Outcome
	Reason   string // the answer's reason (a verdict's, or Stop's)
	Detail   string // the failure's cause
	Stderr   string // tail of a command's stderr
	Duration time.Duration
	// answer is the well-formed answer; zero for a failure.
	answer answer
	// policy is a policy handler's decision; nil for other handlers.
	policy *policyResult
}

// matching returns the rules of enabled groups that apply to tool for this
// event kind, in run order. The answer is cached per (kind, tool).
func (r *Runner) matching(kind EventKind, tool string) []match {
	key := matchKey{kind, tool}
	if v, ok := r.matches.Load(key); ok {
		return v.([]match)
	}
	ms := r.computeMatches(kind, tool)
	if r.matchCount.Load() < maxCachedTools {
		if _, loaded := r.matches.LoadOrStore(key, ms); !loaded {
			r.matchCount.Add(1)
		}
	}
	return ms
}

func (r *Runner) computeMatches(kind EventKind, tool string) []match {
	var ms []match
	for _, g := range r.hooks.Groups {
		if !g.Enabled {
			continue
		}
		// A group's rules are keyed by its own file's dialect; a dialect
		// without this event has nothing to run.
		gk := kind.In(g.Dialect)
		if gk == "" {
			continue
		}
		for _, rule := range g.Rules[gk] {
			if !gk.ruleBased() || rule.Matcher.Match(tool) {
				ms = append(ms, match{g, rule})
			}
		}
	}
	return ms
}

// Run runs every handler that applies to ev, in order: the matching rules
// of enabled groups (in the order Load found them), each rule's handlers in
// declaration order, one after the other. Each handler gets the payload in
// its own file's dialect, and answers in it. The answers are combined into
// one Decision (see combiner): for pre events the strictest verdict wins
// (a failure of a handler with "on_failure": "deny" is a deny), and a deny
// ends a PreToolUse chain; post events never deny. Run always returns a
// decision: failures are logged, not returned.
func (r *Runner) Run(ctx context.Context, ev Event) Decision {
	if r.opts.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.Deadline)
		defer cancel()
	}
	eventID := newID()
	log := r.opts.Logger.With().Str(fieldEvent, string(ev.Kind)).Str(fieldEventID, eventID).Str(fieldTool, ev.Tool).Logger()

	c := newCombiner(ev)
	if reason := r.logLoadErrors(log, ev.Kind); reason != "" {
		c.raise(Deny, reason)
	}
	var results []Result
	n := 0
chain:
	for _, m := range r.matching(ev.Kind, ev.Tool) {
		for _, h := range m.rule.Handlers {
			if c.stopped {
				break chain
			}
			n++
			res := r.runHandler(ctx, c, m.group, h, fmt.Sprintf("%s-%d", eventID, n))
			effect := c.add(m.group, h, res)
			r.logResult(log, res, m.group.Dialect, effect)
			results = append(results, res)
		}
	}
	return c.decision(results)
}

// logLoadErrors logs each load error on its own line and returns the deny
// reason they give, if any.
func (r *Runner) logLoadErrors(log zerolog.Logger, kind EventKind) string {
	effect := "fail-open"
	switch {
	case !kind.IsPre():
		effect = "ignored"
	case r.opts.FailClosedOnLoadError:
		effect = "fail-closed"
	}
	var first string
	count := 0
	for _, p := range r.opts.LoadProblems {
		if p.Severity != srcpos.SeverityError {
			continue
		}
		if count == 0 {
			first = p.Error()
		}
		count++
		log.Error().Str(fieldOutcome, string(OutcomeLoadError)).Str(fieldEffect, effect).
			Str(fieldSource, fmt.Sprintf("%s:%d", p.File, p.Line)).Str(fieldDetail, p.Error()).Msg("hooks.json")
	}
	if count == 0 || effect != "fail-closed" {
		return ""
	}
	return fmt.Sprintf("hooks.json did not load cleanly (%d error(s); first: %s) and load errors deny", count, first)
}

func (r *Runner) logResult(log zerolog.Logger, res Result, dialect Dialect, effect string) {
	var e *zerolog.Event
	switch {
	case res.Outcome.Failed():
		e = log.Warn()
	default:
		e = log.Info()
	}
	e = e.Str(fieldGroup, res.Group).
		Str(fieldHandler, res.Handler.Name()).
		Str(fieldHandlerType, string(res.Handler.Type)).
		Str(fieldDialect, string(dialect)).
		Str(fieldOutcome, string(res.Outcome)).
		Str(fieldEffect, effect).
		Str(fieldSource, fmt.Sprintf("%s:%d", res.Handler.File, res.Handler.Line))
	detail := res.Detail
	if !res.Outcome.Failed() && res.Reason != "" {
		detail = res.Reason // a verdict's or Stop's reason
	}
	e = e.Str(fieldDetail, detail)
	if res.Stderr != "" {
		e = e.Str(fieldStderr, res.Stderr)
	}
	if res.policy != nil {
		// The policy file, the rule (file:line) and its level.
		e = e.EmbedObject(res.policy.decision)
		if res.policy.approver != "" {
			e = e.Str(fieldApprover, res.policy.approver)
		}
	}
	e.Float64(fieldDuration, float64(res.Duration.Microseconds())/1000).Msg("hook")
}

// runHandler runs one handler on the event as its group's dialect sees
// it, and classifies what happened.
func (r *Runner) runHandler(ctx context.Context, c *combiner, g *Group, h *Handler, idemKey string) (res Result) {
	res = Result{Group: g.Name, Handler: h}
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()
	if err := ctx.Err(); err != nil {
		res.Outcome, res.Detail = OutcomeTimeout, "not run: "+ctxCause(err)
		return res
	}
	if h.Invalid != "" {
		res.Outcome, res.Detail = OutcomeSpawnError, h.Invalid
		return res
	}
	kind := c.ev.Kind.In(g.Dialect)
	payload, err := c.payloadFor(g.Dialect)
	if err != nil {
		res.Outcome, res.Detail = OutcomeSpawnError, "converting the event to the "+string(g.Dialect)+" dialect: "+err.Error()
		return res
	}
	hctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()

	dir := g.Dir
	if dir == "" {
		dir = r.hooks.Workspace
	}
	out, failure := r.invoke(hctx, h, invocation{payload: payload, kind: kind, dir: dir, idemKey: idemKey})
	res.Stderr, res.policy = failure.stderr, failure.policy
	if failure.outcome != "" {
		res.Outcome, res.Detail = failure.outcome, failure.detail
		if failure.timedOut {
			res.Detail = timeoutDetail(ctx, h.Timeout) + failure.detail
		}
		return res
	}
	if kind.isPost() {
		res.Outcome, res.Detail = OutcomeAllow, "post event: output ignored"
		return res
	}
	res.Outcome, res.Detail, res.answer = parseAnswer(kind, out)
	res.Reason = res.answer.reason
	return res
}

// timeoutDetail says whose deadline passed: the handler's own timeout, the
// chain's deadline, or a cancellation.
func timeoutDetail(parent context.Context, timeout time.Duration) string {
	if err := parent.Err(); err != nil {
		return ctxCause(err)
	}
	return fmt.Sprintf("timed out after %v", timeout)
}

func ctxCause(err error) string {
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return "deadline of the hook chain exceeded"
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.ToValidUTF8(s, "?")
}

// newID is a random identifier (UUID v4 layout) for an event.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
