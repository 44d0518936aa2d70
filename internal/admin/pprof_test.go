package admin_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/internal/admin"
	"github.com/hookgate/hookgate/internal/testlog"
)

// pprofRoutes are every route Options.Pprof mounts.
var pprofRoutes = []string{
	"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/profile", "/debug/pprof/symbol", "/debug/pprof/trace",
	"/debug/pprof/allocs", "/debug/pprof/block", "/debug/pprof/goroutine", "/debug/pprof/heap",
	"/debug/pprof/mutex", "/debug/pprof/threadcreate",
}

// pprofOptions are fullOptions with profiles on, behind testToken.
func pprofOptions() admin.Options {
	o := fullOptions()
	o.Token = testToken
	o.Pprof = true
	return o
}

// startWithWriteTimeout is start on a server with a WriteTimeout.
func startWithWriteTimeout(t *testing.T, o admin.Options, writeTimeout time.Duration) *fixture {
	t.Helper()
	f := &fixture{log: &testlog.Buffer{}}
	o.Logger = zerolog.New(f.log).Level(zerolog.DebugLevel)
	f.srv = httptest.NewUnstartedServer(admin.New(o))
	f.srv.Config.WriteTimeout = writeTimeout
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func TestPprofOffByDefault(t *testing.T) {
	o := fullOptions()
	o.Token = testToken
	f := start(t, o)
	for _, path := range pprofRoutes {
		r := f.do(t, "GET", path, "Bearer "+testToken)
		if r.status != 404 {
			t.Errorf("GET %s without Pprof: %d, want 404", path, r.status)
			continue
		}
		jsonError(t, r)
	}
}

// Without a token the profiles are never served, whatever Pprof says.
func TestPprofNeedsAToken(t *testing.T) {
	o := pprofOptions()
	o.Token = ""
	f := start(t, o)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine"} {
		if r := f.do(t, "GET", path, ""); r.status != 404 {
			t.Errorf("GET %s with Pprof and no token: %d, want 404", path, r.status)
		}
	}
	if !strings.Contains(f.log.String(), "profiles need an admin token") {
		t.Errorf("no error logged about profiles without a token:\n%s", f.log.String())
	}
}

func TestPprofBehindToken(t *testing.T) {
	f := start(t, pprofOptions())
	for _, path := range pprofRoutes {
		for _, auth := range []string{"", "Bearer " + wrongTok} {
			r := f.do(t, "GET", path+"?seconds=1", auth)
			if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s with %q: %d (WWW-Authenticate %q), want 401", path, auth, r.status, r.header.Get("WWW-Authenticate"))
				continue
			}
			jsonError(t, r)
		}
	}
	if strings.Contains(f.log.String(), "seconds") {
		t.Errorf("the query string was logged:\n%s", f.log.String())
	}
}

func TestPprofServes(t *testing.T) {
	f := start(t, pprofOptions())
	auth := "Bearer " + testToken

	index := f.do(t, "GET", "/debug/pprof/", auth)
	if index.status != 200 || !strings.HasPrefix(index.header.Get("Content-Type"), "text/html") {
		t.Fatalf("index: %d %q", index.status, index.header.Get("Content-Type"))
	}
	for _, name := range []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate", "profile", "trace"} {
		if !strings.Contains(index.body, `href='`+name) {
			t.Errorf("index does not link %s", name)
		}
	}

	for _, name := range []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate"} {
		t.Run(name, func(t *testing.T) {
			r := f.do(t, "GET", "/debug/pprof/"+name, auth)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if cc := r.header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
			checkProfile(t, []byte(r.body))
		})
	}

	// The text forms, as an operator reads them with curl.
	if r := f.do(t, "GET", "/debug/pprof/goroutine?debug=2", auth); r.status != 200 || !strings.Contains(r.body, "goroutine ") {
		t.Errorf("goroutine?debug=2: %d %.200q", r.status, r.body)
	}
	if r := f.do(t, "GET", "/debug/pprof/cmdline", auth); r.status != 200 || r.body == "" {
		t.Errorf("cmdline: %d %q", r.status, r.body)
	}
	if r := f.do(t, "GET", "/debug/pprof/symbol", auth); r.status != 200 || !strings.Contains(r.body, "num_symbols") {
		t.Errorf("symbol: %d %q", r.status, r.body)
	}

	// The router's own answers still apply around the profiles.
	if r := f.do(t, "GET", "/debug/pprof/nope", auth); r.status != 404 {
		t.Errorf("unknown profile: %d, want 404", r.status)
	} else {
		jsonError(t, r)
	}
	r := f.do(t, "POST", "/debug/pprof/heap", auth)
	if r.status != 405 || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST heap: %d Allow %q, want 405 GET, HEAD", r.status, r.header.Get("Allow"))
	}
	if r := f.do(t, "DELETE", "/debug/pprof/symbol", auth); r.status != 405 || r.header.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("DELETE symbol: %d Allow %q, want 405 GET, HEAD, POST", r.status, r.header.Get("Allow"))
	}

	logs := f.log.String()
	if !strings.Contains(logs, `"path":"/debug/pprof/heap"`) {
		t.Errorf("no request line for the heap profile:\n%s", logs)
	}
	for _, secret := range []string{testToken, "debug=2"} {
		if strings.Contains(logs, secret) {
			t.Errorf("admin log contains %q", secret)
		}
	}
}

// A CPU profile and a trace run for their ?seconds even when that is
// longer than the server's write timeout: net/http/pprof moves the write
// deadline past the profile's end, through the middlewares' response
// writer. (Cut off at the write timeout, the answer would be a broken
// connection, not a profile.)
func TestPprofCPUProfileAndTrace(t *testing.T) {
	f := startWithWriteTimeout(t, pprofOptions(), 700*time.Millisecond)
	auth := "Bearer " + testToken

	r := f.do(t, "GET", "/debug/pprof/profile?seconds=1", auth)
	if r.status != 200 {
		t.Fatalf("profile?seconds=1: %d %s", r.status, r.body)
	}
	checkProfile(t, []byte(r.body))

	r = f.do(t, "GET", "/debug/pprof/trace?seconds=1", auth)
	if r.status != 200 || !strings.HasPrefix(r.body, "go 1.") {
		t.Fatalf("trace?seconds=1: %d, %.20q", r.status, r.body)
	}
}

// checkProfile checks that body is what `go tool pprof` reads: a gzipped
// protocol buffer (its fields walked to the end) with sample types and a
// string table.
func checkProfile(t *testing.T, body []byte) {
	t.Helper()
	if len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Fatalf("not gzip: %.40q", body)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := protoFields(raw)
	if err != nil {
		t.Fatalf("not a protocol buffer: %v", err)
	}
	// profile.proto: 1 sample_type, 6 string_table.
	if fields[1] == 0 || fields[6] == 0 {
		t.Fatalf("profile without sample types or strings: fields %v", fields)
	}
}

// protoFields walks the top-level fields of a protocol buffer message and
// counts them by number.
func protoFields(b []byte) (map[uint64]int, error) {
	fields := map[uint64]int{}
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("bad key at %d bytes from the end", len(b))
		}
		b = b[n:]
		switch key & 7 {
		case 0: // varint
			if _, n = binary.Uvarint(b); n <= 0 {
				return nil, fmt.Errorf("bad varint of field %d", key>>3)
			}
			b = b[n:]
		case 1: // 64-bit
			if len(b) < 8 {
				return nil, fmt.Errorf("short fixed64 of field %d", key>>3)
			}
			b = b[8:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, fmt.Errorf("bad length of field %d", key>>3)
			}
			b = b[n+int(l):]
		case 5: // 32-bit
			if len(b) < 4 {
				return nil, fmt.Errorf("short fixed32 of field %d", key>>3)
			}
			b = b[4:]
		default:
			return nil, fmt.Errorf("wire type %d of field %d", key&7, key>>3)
		}
		fields[key>>3]++
	}
	return fields, nil
}
