package service

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzEvent: whatever body a caller with the token sends, the service
// answers 200 with a decision of its dialect, and never panics.
func FuzzEvent(f *testing.F) {
	for _, seed := range []string{
		remoteEvent("code_execution", `{"code": "rm -rf /"}`),
		cliEvent("run_command", `{"CommandLine": "ls"}`),
		`{"tool_call": {"name": 5}}`, `{"toolCall": null}`, `[]`, `null`, `{"tool_call": {"name": "x", "args": "y"}}`, "",
	} {
		f.Add(seed)
	}
	fx := start(f, basePolicy, nil)
	f.Fuzz(func(t *testing.T, body string) {
		for path, allowed := range map[string]string{
			"/v1/hooks/pre_tool_execution": "allow deny",
			"/v1/hooks/PreToolUse":         "allow ask deny",
		} {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			fx.svc.Handler().ServeHTTP(rec, req)
			var a struct{ Decision string }
			if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &a) != nil || !strings.Contains(allowed, a.Decision) || a.Decision == "" {
				t.Fatalf("%s %q: %d %s", path, body, rec.Code, rec.Body.String())
			}
		}
	})
}
