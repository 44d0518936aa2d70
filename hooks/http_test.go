package hooks

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func httpHook(url, extra string) string {
	return fmt.Sprintf(`{"type": "http", "url": %q, "headers": {"X-Event-Source": "agent-sandbox"}%s}`, url, extra)
}

func TestHTTPOutcomes(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/allow":
			w.Write([]byte(`{"decision": "allow"}`))
		case "/deny":
			w.Write([]byte(`{"decision": "deny", "reason": "not today"}`))
		case "/500":
			w.WriteHeader(500)
			w.Write([]byte(`{"decision": "deny", "reason": "ignored"}`))
		case "/redirect":
			http.Redirect(w, r, "/deny", http.StatusTemporaryRedirect)
		case "/text":
			w.Write([]byte("OK"))
		case "/other":
			w.Write([]byte(`{"status": "received"}`))
		case "/empty":
		case "/huge":
			w.Write([]byte(strings.Repeat(" ", 1<<20+10)))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "https://" + ln.Addr().String() + "/"
	ln.Close()

	cases := []struct {
		name, url string
		outcome   Outcome
		detail    string
	}{
		{"allow", srv.URL + "/allow", OutcomeAllow, ""},
		{"deny", srv.URL + "/deny", OutcomeDeny, ""},
		{"non-2xx", srv.URL + "/500", OutcomeHTTPStatus, "status 500"},
		{"redirect", srv.URL + "/redirect", OutcomeHTTPStatus, "status 307 (redirect not followed"},
		{"plain text", srv.URL + "/text", OutcomeBadResponse, "not a JSON object"},
		{"other JSON", srv.URL + "/other", OutcomeBadResponse, `no "decision"`},
		{"empty body", srv.URL + "/empty", OutcomeBadResponse, "empty output"},
		{"oversized body", srv.URL + "/huge", OutcomeBadResponse, "response body exceeds"},
		{"slow server", srv.URL + "/slow", OutcomeTimeout, "timed out after 300ms"},
		{"connection refused", closedURL, OutcomeConnectError, "refused"},
	}
	client := httpClient(t, ca)
	for _, tc := range cases {
		for _, failDeny := range []bool{false, true} {
			name, extra := tc.name, `, "timeout": 0.3`
			if failDeny {
				name += "/on_failure=deny"
				extra += `, "on_failure": "deny"`
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				e.writeWS(t, oneHook(httpHook(tc.url, extra)))
				r, logs := e.runner(t, RunnerOptions{HTTP: client})
				d := r.Run(ctxT(t), event(t, PreToolExecution, "read_file", `{"path": "x"}`))
				res := d.Results[0]
				if res.Outcome != tc.outcome || !strings.Contains(res.Detail, tc.detail) {
					t.Fatalf("outcome = %s %q, want %s containing %q", res.Outcome, res.Detail, tc.outcome, tc.detail)
				}
				wantDeny := tc.outcome == OutcomeDeny || failDeny && tc.outcome.Failed()
				if d.Denied() != wantDeny {
					t.Fatalf("decision = %+v, want denied=%v", d, wantDeny)
				}
				if tc.outcome == OutcomeDeny && d.Reason != "not today" {
					t.Errorf("reason = %q", d.Reason)
				}
				l := logs.Lines(t)[0]
				if l[fieldOutcome] != string(tc.outcome) || l[fieldHandlerType] != "http" || l[fieldHandler] != tc.url {
					t.Errorf("log line = %v", l)
				}
			})
		}
	}
}

func TestHTTPRetrySameIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n%3 != 0 { // two 503s, then the answer
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"decision":"deny","reason":"third attempt"}`))
	}))
	e := newEnv(t)
	// Two handlers to the same URL: each its own key, kept across retries.
	e.writeWS(t, `{"a": {"pre_tool_execution": [{"matcher": "*", "hooks": [`+httpHook(srv.URL, `, "timeout": 5`)+`]}]},
		"b": {"pre_tool_execution": [{"matcher": "*", "hooks": [`+httpHook(srv.URL, `, "timeout": 5`)+`]}]}}`)
	r, _ := e.runner(t, RunnerOptions{HTTP: httpClient(t, ca)})
	d := r.Run(ctxT(t), event(t, PreToolExecution, "x", `{}`))
	if d.Reason != "third attempt; third attempt" {
		t.Fatalf("decision = %+v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 6 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] ||
		keys[3] != keys[4] || keys[4] != keys[5] || keys[0] == keys[3] {
		t.Fatalf("idempotency keys = %q", keys)
	}
}

func TestHTTPWithoutClient(t *testing.T) {
	e := newEnv(t)
	e.writeWS(t, oneHook(httpHook("https://hooks.example/", `, "on_failure": "deny"`)))
	r, _ := e.runner(t, RunnerOptions{})
	d := r.Run(ctxT(t), event(t, PreToolExecution, "x", `{}`))
	if d.Results[0].Outcome != OutcomeSpawnError || !d.Denied() {
		t.Fatalf("decision = %+v", d)
	}
}
