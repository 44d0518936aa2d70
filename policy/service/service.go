// Package service is the policy's HTTP decision service: it answers the
// pre-tool hook POSTs of both agent dialects from one policy file, so that
// a remote sandbox's HTTP hook (reaching it through the gateway, which adds
// the bearer token) and a CLI agent's hook get the same decision.
//
//	POST /v1/hooks/pre_tool_execution  remote-sandbox event → {"decision": "allow"|"deny", "reason": ...}
//	POST /v1/hooks/PreToolUse          CLI event → {"decision": "allow"|"ask"|"deny", "reason": ...}
//	GET  /metrics                      Prometheus metrics
//
// Every endpoint wants "Authorization: Bearer TOKEN" when a token is set
// (401 otherwise). A hook endpoint answers 200 with a decision whenever the
// caller is authorised: an event it cannot read is denied, never answered
// with an error status that the remote runtime would take as allow.
//
// The remote dialect has no ask: an ask goes to the policy's approver, if
// any, and becomes its allow or deny; without one, or when it fails, the
// ask is a deny "needs approval".
package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/policy"
)

// MaxEventSize caps one hook POST's body.
const MaxEventSize = 4 << 20

// The two dialects, as named in logs and metrics.
const (
	DialectRemote = "remote"
	DialectCLI    = "cli"
)

// NeedsApproval is the reason of an ask denied in the remote dialect.
const NeedsApproval = policy.NeedsApproval

// Options configure a Service.
type Options struct {
	// File is the policy file; it is loaded by New and again by Reload.
	File string
	// Token, when not empty, is the bearer token every request must carry.
	Token string
	// Approver delivers asks to the policy's approver URL (usually through
	// the gateway). Nil: asks in the remote dialect are denied.
	Approver *hookhttp.Client
	// Logger receives one line per decision and per reload.
	Logger zerolog.Logger
}

// Service answers hook POSTs from the policy currently loaded.
type Service struct {
	file     string
	token    [sha256.Size]byte
	hasToken bool
	approver *hookhttp.Client
	log      zerolog.Logger
	policy   atomic.Pointer[policy.Policy]
	reloadMu sync.Mutex
	m        *metrics
	handler  http.Handler
}

// New loads the policy file and builds the service.
func New(opts Options) (*Service, error) {
	p, err := policy.Load(opts.File)
	if err != nil {
		return nil, err
	}
	s := &Service{file: opts.File, approver: opts.Approver, log: opts.Logger, m: newMetrics()}
	if opts.Token != "" {
		s.token, s.hasToken = sha256.Sum256([]byte(opts.Token)), true
	}
	s.policy.Store(p)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/hooks/pre_tool_execution", s.serveRemote)
	mux.HandleFunc("POST /v1/hooks/PreToolUse", s.serveCLI)
	mux.Handle("GET /metrics", s.m.handler)
	s.handler = s.authorised(mux)
	return s, nil
}

// Handler is the service's HTTP handler.
func (s *Service) Handler() http.Handler { return s.handler }

// Policy is the policy in effect.
func (s *Service) Policy() *policy.Policy { return s.policy.Load() }

// Reload loads the policy file again and, if it is sound, puts it in
// effect; otherwise the policy in effect stays and the error is returned.
func (s *Service) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	p, err := policy.Load(s.file)
	if err != nil {
		s.m.reloads.WithLabelValues("error").Inc()
		s.log.Error().Str("policy", s.file).Err(err).Msg("policy reload failed; the previous policy stays in effect")
		return err
	}
	s.policy.Store(p)
	s.m.reloads.WithLabelValues("ok").Inc()
	s.log.Info().Str("policy", s.file).Int("rules", len(p.Rules())).Msg("policy reloaded")
	return nil
}

// authorised checks the bearer token, in constant time, on every request.
func (s *Service) authorised(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hasToken {
			got := sha256.Sum256([]byte(bearer(r.Header.Get("Authorization"))))
			if subtle.ConstantTimeCompare(got[:], s.token[:]) != 1 {
				s.m.unauthorised.Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="hookgate-policy"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func bearer(h string) string {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (s *Service) serveRemote(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, DialectRemote, policy.RemoteCallKey)
}

func (s *Service) serveCLI(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, DialectCLI, policy.CLICallKey)
}

// serve decides one event of a dialect whose tool call sits under callKey.
func (s *Service) serve(w http.ResponseWriter, r *http.Request, dialect, callKey string) {
	start := time.Now()
	p := s.policy.Load()
	body, in, err := readEvent(w, r, callKey)
	var d policy.Decision
	if err != nil {
		d = policy.Decision{Action: policy.Deny, Reason: "policy service: " + err.Error(),
			Rule: policy.Rule{File: p.File(), Level: policy.LevelDefault, Source: "malformed event"}, Err: err}
	} else {
		d = p.Decide(r.Context(), in)
	}
	var approver string
	if dialect == DialectRemote && d.Action == policy.Ask {
		var post policy.ApproverPost
		if s.approver != nil {
			post = s.approver.PostAnswer
		}
		d, approver = p.Approve(r.Context(), d, body, post)
	}
	ev := s.log.Info()
	if d.Err != nil {
		s.m.errors.Inc()
		ev = s.log.Warn()
	}
	if approver != "" {
		ev = ev.Str("approver", approver)
	}
	s.m.decisions.WithLabelValues(dialect, string(d.Action), d.Rule.Level.String()).Inc()
	ev.Str("dialect", dialect).Str("tool", shorten(in.Tool)).EmbedObject(d).
		Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).Msg("policy decision")
	w.Header()["Content-Type"] = []string{"application/json"}
	_, _ = w.Write(d.AnswerJSON())
}

// shorten cuts a caller-supplied name for the log.
func shorten(s string) string {
	const maxLogged = 256
	if len(s) > maxLogged {
		return s[:maxLogged] + "..."
	}
	return s
}

// readEvent reads a hook event: the tool call's name and arguments, and
// the whole event.
func readEvent(w http.ResponseWriter, r *http.Request, callKey string) ([]byte, policy.Input, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxEventSize))
	if err != nil {
		return nil, policy.Input{}, fmt.Errorf("cannot read the event: %w", err)
	}
	in, err := policy.EventInput(body, callKey)
	if err != nil {
		return nil, in, err
	}
	return body, in, nil
}

// metrics are the service's own, on its own registry.
type metrics struct {
	decisions    *prometheus.CounterVec
	errors       prometheus.Counter
	reloads      *prometheus.CounterVec
	unauthorised prometheus.Counter
	handler      http.Handler
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hookgate_policy", Name: "decisions_total",
			Help: "Decisions by dialect (remote, cli), decision (allow, ask, deny) and the level of the rule that took it (default when none)."},
			[]string{"dialect", "decision", "level"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "hookgate_policy", Name: "evaluation_errors_total",
			Help: "Fail-closed denies: a predicate that could not be evaluated, or an event that could not be read."}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hookgate_policy", Name: "reloads_total",
			Help: "Policy reloads by result (ok, error)."}, []string{"result"}),
		unauthorised: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "hookgate_policy", Name: "unauthorized_total",
			Help: "Requests refused with 401 for a missing or wrong bearer token."}),
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	reg.MustRegister(m.decisions, m.errors, m.reloads, m.unauthorised,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
	return m
}
