// Package admin is the gateway's admin API: health and readiness checks,
// Prometheus metrics, the CA certificate, the effective config, hot reload
// and the ring of recent decisions. It serves on its own listener
// (listen.admin, default 127.0.0.1:9090), which must never be reachable from
// the sandbox.
//
// Routes:
//
//	GET  /healthz        200 "ok" while the process serves; never needs a token
//	GET  /readyz         200 "ok" when Options.Ready says so, else 503 {"error": ...}; never needs a token
//	GET  /metrics        Prometheus exposition (Options.Metrics)
//	GET  /ca.pem         the gateway's CA certificate, application/x-pem-file
//	GET  /v1/config      the effective config as JSON (Options.Config)
//	POST /v1/reload      200 {"generation": N, "pending_restart": [...]} or 422 {"error": "file:line: field: message"}
//	GET  /v1/decisions   ?limit=N (default 100, at most 1000; more is a 400), newest first;
//	                     ?tenant=NAME: that tenant's only
//	GET  /debug/pprof/   with Options.Pprof only: Go's profiles (see below)
//
// HEAD is answered wherever GET is. With Options.Token set, every route but
// the two health checks needs "Authorization: Bearer <token>"; without it,
// or with another token, the answer is 401 with WWW-Authenticate. Errors,
// including 404 and 405, are JSON: {"error": "..."}. Every response carries
// Cache-Control: no-store. A route whose Options field is nil answers 404
// saying it is not configured.
//
// Each request is logged as one line (method, path, status, bytes,
// duration, client); the Authorization header and the query string are
// never logged. The health checks and /metrics, which probes and scrapers
// call every few seconds, log at debug level unless they fail; everything
// else at info. A panicking handler is recovered, logged with its stack and
// answered with a JSON 500.
//
// With Options.Pprof (and a token: without one profiles are never served)
// the handlers of net/http/pprof are mounted on this router, and only
// here, under /debug/pprof/: the index, cmdline, profile (CPU, ?seconds=N,
// default 30), symbol (GET and POST), trace (?seconds=N, default 1) and
// the named profiles allocs, block, goroutine, heap, mutex and
// threadcreate. Their errors are net/http/pprof's own, in plain text. A
// CPU profile or trace may outlast the server's WriteTimeout: net/http/pprof
// moves the write deadline past its end (through statusWriter's Unwrap),
// and it ends early when the client goes away. Importing
// net/http/pprof also registers it on http.DefaultServeMux; nothing of
// the gateway serves that mux, and admin does not rely on it.
//
// admin sets no timeouts itself: those belong to the caller's http.Server.
// Recommended:
//
//	srv := &http.Server{
//		Handler:           admin.New(opts),
//		ReadHeaderTimeout: 5 * time.Second,
//		ReadTimeout:       10 * time.Second,
//		WriteTimeout:      60 * time.Second, // covers the slowest reload and a full scrape
//		IdleTimeout:       60 * time.Second,
//		MaxHeaderBytes:    16 << 10,
//	}
//
// and shut it down with the proxy listeners (http.Server.Shutdown waits for
// a reload in progress).
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
)

// Limits of GET /v1/decisions.
const (
	defaultDecisionLimit = 100
	maxDecisionLimit     = 1000
)

// Log field names of the request line, defined once.
const (
	fieldMethod   = "method"
	fieldPath     = "path"
	fieldStatus   = "status"
	fieldBytes    = "bytes"
	fieldDuration = "duration_ms"
	fieldClient   = "client"
	messageLine   = "admin request"
)

// realm is the realm named in WWW-Authenticate.
const realm = "hookgate-admin"

// Options configure the admin API. Every field is optional: a nil func or
// handler makes its route answer 404 "... is not configured".
type Options struct {
	// Logger receives one line per request. If zero, nothing is logged.
	Logger zerolog.Logger

	// Token, if not empty, is the bearer token every route but /healthz
	// and /readyz requires (the caller reads it from admin.token_file).
	// Surrounding white space, such as the file's trailing newline, is
	// ignored. A Token of only white space matches nothing: every
	// protected route then answers 401 (fail closed, never open).
	Token string

	// Ready reports whether the gateway is ready (listeners up, config
	// loaded): nil means ready. If Ready is nil, /readyz always says ready.
	Ready func() error

	// Metrics serves GET /metrics, normally (*metrics.Metrics).Handler().
	Metrics http.Handler

	// CAPEM returns the gateway's CA certificate in PEM. If it is nil or
	// returns nothing, /ca.pem answers 404 saying no CA is configured.
	CAPEM func() []byte

	// Config returns the effective config, encoded as JSON as it is. The
	// caller must have rendered every secret as its reference
	// ("${env:NAME}"): admin does not inspect or redact what it encodes.
	Config func() any

	// Reload builds, validates and swaps in a new config and returns its
	// generation and the settings it changed that wait for a restart, or
	// an error naming file, line and field. It receives the request's
	// context. Calls from POST /v1/reload are serialised: a second request
	// waits for the first to finish. The caller counts reloads in metrics
	// (it also reloads on SIGHUP) and must serialise against its own
	// SIGHUP path.
	Reload func(ctx context.Context) (ReloadResult, error)

	// Decisions returns up to limit recent decisions, newest first,
	// typically Ring.Last. What it returns is encoded, then passed through
	// Redact.
	Decisions func(limit int) any

	// TenantDecisions, if set, answers /v1/decisions?tenant=NAME: up to
	// limit recent decisions of that tenant, newest first. Without it the
	// parameter is refused.
	TenantDecisions func(limit int, tenant string) any

	// Pprof serves Go's runtime profiles under /debug/pprof/, behind
	// Token. It takes effect only with a Token: a goroutine dump shows
	// every connection's stack and a CPU profile costs CPU while it runs,
	// so without one the routes are not mounted (and an error is logged).
	Pprof bool

	// Redact, if set, scrubs the encoded answer of /v1/decisions (the
	// gateway's secrets, in every form it knows, become "[redacted]")
	// before it is sent: decisions quote hosts and reasons, and an answer
	// that reaches an HTTP hook must not carry a credential even if one of
	// those slipped through.
	Redact func(string) string
}

type server struct {
	o         Options
	log       zerolog.Logger
	authOn    bool
	tokenSum  [sha256.Size]byte
	tokenOK   bool          // a non-blank token is configured
	reloadSem chan struct{} // capacity 1: one reload at a time
}

// New returns the admin API handler.
func New(o Options) http.Handler {
	s := &server{
		o:         o,
		log:       o.Logger,
		authOn:    o.Token != "",
		reloadSem: make(chan struct{}, 1),
	}
	if tok := strings.TrimSpace(o.Token); tok != "" {
		s.tokenSum = sha256.Sum256([]byte(tok))
		s.tokenOK = true
	} else if s.authOn {
		s.log.Error().Msg("admin token is blank: every route but the health checks will answer 401")
	}

	r := chi.NewRouter()
	r.Use(s.logRequests, s.recoverPanics, noStore, middleware.GetHead)
	r.NotFound(s.notFound)

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Group(func(r chi.Router) {
		r.Use(s.requireToken)
		r.Get("/metrics", s.metrics)
		r.Get("/ca.pem", s.caPEM)
		r.Get("/v1/config", s.config)
		r.Post("/v1/reload", s.reload)
		r.Get("/v1/decisions", s.decisions)
		if o.Pprof && s.authOn {
			mountPprof(r)
		}
	})
	if o.Pprof && !s.authOn {
		s.log.Error().Msg("admin: profiles need an admin token; /debug/pprof/ is not served")
	}
	allow, err := allowedMethods(r)
	if err != nil {
		// Walk fails only when its callback does, and ours never does.
		s.log.Error().Err(err).Msg("admin: listing the routes")
	}
	r.MethodNotAllowed(methodNotAllowed(allow))
	return r
}

// mountPprof puts net/http/pprof's handlers on r, one route each, so that
// an unknown name is this API's JSON 404 and a wrong method its 405.
func mountPprof(r chi.Router) {
	r.Get("/debug/pprof/", pprof.Index)
	r.Get("/debug/pprof/cmdline", pprof.Cmdline)
	r.Get("/debug/pprof/profile", pprof.Profile)
	r.Get("/debug/pprof/symbol", pprof.Symbol)
	r.Post("/debug/pprof/symbol", pprof.Symbol)
	r.Get("/debug/pprof/trace", pprof.Trace)
	// The runtime's own profiles, each by net/http/pprof's handler for it.
	for _, name := range []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate"} {
		r.Get("/debug/pprof/"+name, pprof.Handler(name).ServeHTTP)
	}
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok\n")
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
	}
	writeText(w, http.StatusOK, "ok\n")
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.o.Metrics == nil {
		writeError(w, http.StatusNotFound, "metrics are not configured")
		return
	}
	s.o.Metrics.ServeHTTP(w, r)
}

func (s *server) caPEM(w http.ResponseWriter, _ *http.Request) {
	var pem []byte
	if s.o.CAPEM != nil {
		pem = s.o.CAPEM()
	}
	if len(pem) == 0 {
		writeError(w, http.StatusNotFound, "no CA is configured (set ca.cert_file and ca.key_file, or run `gateway ca init`)")
		return
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("Content-Length", strconv.Itoa(len(pem)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(pem)
}

func (s *server) config(w http.ResponseWriter, _ *http.Request) {
	if s.o.Config == nil {
		writeError(w, http.StatusNotFound, "config is not available")
		return
	}
	writeJSON(w, http.StatusOK, s.o.Config())
}

// ReloadResult is the answer of a successful reload.
type ReloadResult struct {
	// Generation is the generation of the config now in force.
	Generation uint64 `json:"generation"`
	// PendingRestart names the settings the new config changes but which
	// are read only at start: they take effect on the next restart. Never
	// nil, so the answer always has the list.
	PendingRestart []string `json:"pending_restart"`
}

func (s *server) reload(w http.ResponseWriter, r *http.Request) {
	if s.o.Reload == nil {
		writeError(w, http.StatusNotFound, "reload is not configured")
		return
	}
	select {
	case s.reloadSem <- struct{}{}:
	case <-r.Context().Done():
		writeError(w, http.StatusServiceUnavailable, "reload abandoned while waiting for another reload: "+r.Context().Err().Error())
		return
	}
	defer func() { <-s.reloadSem }() // also on panic
	// The client may have left while we waited; then do not reload for it.
	if err := r.Context().Err(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "reload abandoned while waiting for another reload: "+err.Error())
		return
	}
	res, err := s.o.Reload(r.Context())
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	if res.PendingRestart == nil {
		res.PendingRestart = []string{}
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) decisions(w http.ResponseWriter, r *http.Request) {
	if s.o.Decisions == nil {
		writeError(w, http.StatusNotFound, "decisions are not available")
		return
	}
	limit, err := parseLimit(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if tenants, ok := r.URL.Query()["tenant"]; ok {
		if len(tenants) != 1 || tenants[0] == "" || s.o.TenantDecisions == nil {
			writeError(w, http.StatusBadRequest, "tenant: give one tenant name, once")
			return
		}
		writeJSONRedacted(w, http.StatusOK, s.o.TenantDecisions(limit, tenants[0]), s.o.Redact)
		return
	}
	writeJSONRedacted(w, http.StatusOK, s.o.Decisions(limit), s.o.Redact)
}

// parseLimit reads ?limit=N: absent → defaultDecisionLimit; a decimal
// integer from 1 to maxDecisionLimit; anything else, a larger number
// included, is an error that names the range (a silently shortened answer
// would look like the whole history).
func parseLimit(r *http.Request) (int, error) {
	vals, ok := r.URL.Query()["limit"]
	if !ok {
		return defaultDecisionLimit, nil
	}
	if len(vals) != 1 {
		return 0, fmt.Errorf("limit: give it once, not %d times", len(vals))
	}
	v := vals[0]
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxDecisionLimit || v[0] == '+' {
		return 0, fmt.Errorf("limit: %q is not a whole number from 1 to %d (the maximum)", v, maxDecisionLimit)
	}
	return n, nil
}

// requireToken enforces the bearer token, if one is configured.
func (s *server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authOn {
			next.ServeHTTP(w, r)
			return
		}
		scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		cred = strings.TrimSpace(cred)
		if !strings.EqualFold(scheme, "Bearer") || cred == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			writeError(w, http.StatusUnauthorized, "this route needs Authorization: Bearer <admin token>")
			return
		}
		// Compare digests so that neither the content nor the length of
		// the token leaks through timing.
		sum := sha256.Sum256([]byte(cred))
		if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 || !s.tokenOK {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "invalid admin token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "no such route: "+r.URL.Path)
}

// allowedMethods lists, for each path of r, the methods it answers, as the
// Allow header of a 405 gives them. chi's own 405 handler sets Allow, but
// one with a JSON body has to work it out: it is read once from the routes.
func allowedMethods(r chi.Routes) (map[string]string, error) {
	methods := make(map[string][]string)
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		methods[route] = append(methods[route], method)
		if method == http.MethodGet { // GetHead answers HEAD wherever GET is
			methods[route] = append(methods[route], http.MethodHead)
		}
		return nil
	})
	allow := make(map[string]string, len(methods))
	for route, ms := range methods {
		slices.Sort(ms)
		allow[route] = strings.Join(slices.Compact(ms), ", ")
	}
	return allow, err
}

// methodNotAllowed answers a 405 with the Allow header and a JSON error.
func methodNotAllowed(allow map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a := allow[r.URL.Path]; a != "" {
			w.Header().Set("Allow", a)
		}
		writeError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	}
}

// logRequests writes one line per request, after it is answered.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			lvl := zerolog.InfoLevel
			if status < 400 && isProbe(r.URL.Path) {
				lvl = zerolog.DebugLevel
			}
			s.log.WithLevel(lvl).
				Str(fieldMethod, r.Method).
				Str(fieldPath, r.URL.Path).
				Int(fieldStatus, status).
				Int64(fieldBytes, sw.bytes).
				Float64(fieldDuration, float64(time.Since(start).Microseconds())/1000).
				Str(fieldClient, r.RemoteAddr).
				Msg(messageLine)
		}()
		next.ServeHTTP(sw, r)
	})
}

func isProbe(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// recoverPanics turns a handler panic into a logged error and a JSON 500
// (if nothing was written yet). http.ErrAbortHandler is passed on: it is
// net/http's way to abort a response on purpose.
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { // a sentinel panic value, not a wrapped error
				panic(v)
			}
			s.log.Error().
				Str(fieldMethod, r.Method).
				Str(fieldPath, r.URL.Path).
				Str("panic", fmt.Sprint(v)).
				Bytes("stack", debug.Stack()).
				Msg("admin handler panicked")
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				// Part of the answer is out: abort the connection so the
				// client sees a broken response, not a short one.
				panic(http.ErrAbortHandler)
			}
			writeError(w, http.StatusInternalServerError, "internal error")
		}()
		next.ServeHTTP(w, r)
	})
}

// noStore keeps config, decisions and tokens' answers out of caches.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status and the body size for the log line.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are interim
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type errorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorResponse{Error: msg})
}

// writeJSON encodes v fully before writing, so that an encoding failure
// still gets a clean 500 rather than half a body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONRedacted(w, status, v, nil)
}

// writeJSONRedacted is writeJSON with the encoded answer passed through
// redact, when it is set.
func writeJSONRedacted(w http.ResponseWriter, status int, v any, redact func(string) string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "${env:X}" and "<...>" readable; this is not HTML
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		status = http.StatusInternalServerError
		_ = json.NewEncoder(&buf).Encode(errorResponse{Error: "encode response: " + err.Error()})
	}
	body := buf.Bytes()
	if redact != nil {
		body = []byte(redact(buf.String()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeText(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(s)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(s))
}
