package hooks

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/hookhttp"
	"github.com/hookgate/hookgate/internal/srcpos"

	"github.com/hookgate/hookgate/internal/testlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is a root and a workspace directory for one test.
type env struct {
	root, ws string
}

func newEnv(t *testing.T) env {
	t.Helper()
	e := env{root: t.TempDir(), ws: t.TempDir()}
	for _, d := range []string{e.root, e.ws} {
		if err := os.MkdirAll(filepath.Join(d, ".agents"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e env) writeRoot(t *testing.T, content string) {
	writeFile(t, filepath.Join(e.root, HooksFile), content)
}

func (e env) writeWS(t *testing.T, content string) {
	writeFile(t, filepath.Join(e.ws, HooksFile), content)
}

func (e env) load(t *testing.T) (*Hooks, srcpos.Errors) {
	t.Helper()
	h, ps, err := Load(LoadOptions{Workspace: e.ws, Root: e.root})
	if err != nil {
		t.Fatal(err)
	}
	return h, ps
}

// runner loads e and returns a runner logging into the returned buffer.
func (e env) runner(t *testing.T, opts RunnerOptions) (*Runner, *testlog.Buffer) {
	t.Helper()
	h, _ := e.load(t)
	lb := &testlog.Buffer{}
	opts.Logger = zerolog.New(lb)
	return NewRunner(h, opts), lb
}

func event(t *testing.T, kind EventKind, tool, args string) Event {
	t.Helper()
	ev, err := NewEvent(kind, tool, json.RawMessage(args), "env_test", "")
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// tlsServer starts an httptest TLS server and writes its certificate to a
// PEM file that the hook client trusts explicitly.
func tlsServer(t testing.TB, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, caFile
}

func httpClient(t testing.TB, caFile string) *hookhttp.Client {
	t.Helper()
	c, err := hookhttp.New(hookhttp.Options{
		Version: "test", CAFile: caFile, Getenv: func(string) string { return "" },
		RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
