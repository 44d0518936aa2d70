package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
)

// maxBody caps a request body; hookgate's events are far smaller.
const maxBody = 1 << 20

// event is the hook event hookgate posts (docs/hooks.md, "The event").
type event struct {
	ToolCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"tool_call"`
	EnvironmentID string `json:"environment_id"`
	Error         string `json:"error,omitempty"`
}

// decision is the answer to a pre_tool_execution hook.
type decision struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

// destructiveRM matches `rm -rf` and its flag-order variants (`rm -fr`,
// `rm -Rf`, `rm -v -rf`, ...). It is a demo policy: a real gate should not
// rest on pattern-matching shell text.
var destructiveRM = regexp.MustCompile(`\brm\s+(?:-\S+\s+)*-[a-zA-Z]*(?:[rR][a-zA-Z]*f|f[a-zA-Z]*[rR])`)

type receiver struct {
	tokenSum [sha256.Size]byte
	log      zerolog.Logger
}

// newRouter returns the receiver's routes; every /api route requires the
// bearer token.
func newRouter(token string, log zerolog.Logger) http.Handler {
	rc := &receiver{tokenSum: sha256.Sum256([]byte(token)), log: log}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, rc.accessLog)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	r.Route("/api/v1", func(r chi.Router) {
		r.Use(rc.requireToken)
		r.Post("/pre-tool", rc.preTool)
		r.Post("/agent-events", rc.agentEvent)
	})
	return r
}

// requireToken answers 401 unless the request carries the expected bearer
// token. Both sides are hashed first, so the comparison takes the same time
// whatever the length or content of the offered token.
func (rc *receiver) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offered, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(offered))
		if !ok || subtle.ConstantTimeCompare(sum[:], rc.tokenSum[:]) != 1 {
			why := "wrong bearer token"
			if !ok {
				why = "no bearer token (did the request go through the gateway?)"
			}
			rc.log.Warn().Str("path", r.URL.Path).Str("remote", r.RemoteAddr).Str("reason", why).Msg("unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="hookgate-receiver"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// preTool is the security gate.
func (rc *receiver) preTool(w http.ResponseWriter, r *http.Request) {
	ev, ok := readEvent(w, r)
	if !ok {
		return
	}
	d := decision{Decision: "allow"}
	if ev.ToolCall.Name == "code_execution" && anyString(ev.ToolCall.Args, destructiveRM.MatchString) {
		d = decision{Decision: "deny", Reason: "Destructive command blocked by security gate: `rm -rf` is not allowed in this sandbox."}
	}
	rc.log.Info().Str("hook", "pre-tool").Str("tool", ev.ToolCall.Name).Str("environment_id", ev.EnvironmentID).
		Str("decision", d.Decision).Str("reason", d.Reason).Msg("decision")
	writeJSON(w, http.StatusOK, d)
}

// agentEvent is the audit log: one line per event.
func (rc *receiver) agentEvent(w http.ResponseWriter, r *http.Request) {
	ev, ok := readEvent(w, r)
	if !ok {
		return
	}
	l := rc.log.Info().Str("hook", "agent-events").Str("tool", ev.ToolCall.Name).
		Str("environment_id", ev.EnvironmentID).
		Str("source", r.Header.Get("X-Event-Source")).
		Str("idempotency_key", r.Header.Get("Idempotency-Key"))
	if ev.Error != "" {
		l = l.Str("tool_error", ev.Error)
	}
	l.Msg("audit")
	writeJSON(w, http.StatusOK, decision{Decision: "allow"})
}

// readEvent decodes the body (at most maxBody bytes, one JSON object with a
// tool_call.name); on failure it answers 400 or 413 and returns false.
func readEvent(w http.ResponseWriter, r *http.Request) (*event, bool) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	var ev event
	err := dec.Decode(&ev)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil && (ev.ToolCall == nil || ev.ToolCall.Name == "") {
		err = errors.New("tool_call.name is required")
	}
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, status, map[string]string{"error": "bad event: " + err.Error()})
		return nil, false
	}
	return &ev, true
}

// anyString reports whether match holds for some string anywhere in the
// JSON value raw (decoded, so escapes like \u0020 cannot hide a match).
func anyString(raw json.RawMessage, match func(string) bool) bool {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return match(v)
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for k, e := range v {
				if match(k) || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// accessLog writes one line per request: never headers, so never the token.
func (rc *receiver) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		start := time.Now()
		next.ServeHTTP(ww, r)
		rc.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", ww.Status()).
			Int("bytes", ww.BytesWritten()).Dur("duration", time.Since(start)).Msg("request")
	})
}
