package transform

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Values that must never appear in an error or printed form.
var testEnv = map[string]string{
	"TOKEN":    testSecretValue,
	"USER":     "u-7f3a9c",
	"EMPTY":    "",
	"NEWLINE":  "abc\r\nX-Injected: 1",
	"TRAILING": "tok-with-newline\n",
}

var testFiles = map[string]string{
	"/run/secrets/token": "file-secret-5e1d0c\n\n",
	"/run/secrets/crlf":  "crlf-secret-91b2\r\n",
	"/run/secrets/empty": "\n",
	"/cfg/rel":           "relative-secret-33aa",
	"/run/secrets/inner": "line1\nline2\n",
}

func testOpts() Options {
	return Options{
		LookupEnv: func(k string) (string, bool) { v, ok := testEnv[k]; return v, ok },
		ReadFile: func(p string) ([]byte, error) {
			if v, ok := testFiles[p]; ok {
				return []byte(v), nil
			}
			if p == "/run/secrets/denied" {
				return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission}
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
	}
}

func mustCompile(t testing.TB, specs []HeaderSpec) *Rules {
	t.Helper()
	r, err := Compile(specs, testOpts())
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return r
}

func revealAll(ss []Secret) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Reveal())
	}
	return out
}

func TestCompileValues(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    string
		secrets []string // longest first, as Secrets returns them
	}{
		{"literal", "application/json", "application/json", nil},
		{"env", "Bearer ${env:TOKEN}", "Bearer " + testSecretValue, []string{"Bearer " + testSecretValue, testSecretValue}},
		{"whole env", "${env:TOKEN}", testSecretValue, []string{testSecretValue}},
		{"file trims newlines", "${file:/run/secrets/token}", "file-secret-5e1d0c", []string{"file-secret-5e1d0c"}},
		{"file trims crlf", "k=${file:/run/secrets/crlf}", "k=crlf-secret-91b2", []string{"k=crlf-secret-91b2", "crlf-secret-91b2"}},
		{"several", "${env:USER}:${file:/run/secrets/token}", "u-7f3a9c:file-secret-5e1d0c",
			[]string{"u-7f3a9c:file-secret-5e1d0c", "file-secret-5e1d0c", "u-7f3a9c"}},
		{"escape", "$${env:TOKEN} costs $$5", "${env:TOKEN} costs $5", nil},
		{"lone dollar", "a$b $ c$", "a$b $ c$", nil},
		{"escape then ref", "$$${env:USER}", "$u-7f3a9c", []string{"$u-7f3a9c", "u-7f3a9c"}},
		{"tab allowed", "a\tb", "a\tb", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustCompile(t, []HeaderSpec{{Name: "x-test", Value: tt.value}})
			h := make(map[string][]string)
			r.Apply(h)
			if got := h["X-Test"]; len(got) != 1 || got[0] != tt.want {
				t.Errorf("applied %q, want %q", got, tt.want)
			}
			if got := revealAll(r.Secrets()); !reflect.DeepEqual(got, tt.secrets) {
				t.Errorf("Secrets = %q, want %q", got, tt.secrets)
			}
			if got := r.References(); !reflect.DeepEqual(got, map[string]string{"X-Test": tt.value}) {
				t.Errorf("References = %q", got)
			}
			if (r.Scrubber() == nil) != (tt.secrets == nil) {
				t.Errorf("Scrubber = %v with secrets %d", r.Scrubber(), len(tt.secrets))
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name     string
		spec     HeaderSpec
		field    string
		sentinel error
		text     string // substring of the message
	}{
		{"unset env", HeaderSpec{"Authorization", "Bearer ${env:MISSING}", 3}, "value", ErrUnresolved, "environment variable MISSING is not set"},
		{"empty env", HeaderSpec{"Authorization", "${env:EMPTY}", 0}, "value", ErrEmpty, "${env:EMPTY}: environment variable EMPTY is empty"},
		{"missing file", HeaderSpec{"X-Key", "${file:/nope}", 0}, "value", ErrUnresolved, "cannot read /nope: no such file"},
		{"denied file", HeaderSpec{"X-Key", "${file:/run/secrets/denied}", 0}, "value", ErrUnresolved, "permission denied"},
		{"empty file", HeaderSpec{"X-Key", "${file:/run/secrets/empty}", 0}, "value", ErrEmpty, "file /run/secrets/empty is empty"},
		{"relative file", HeaderSpec{"X-Key", "${file:rel}", 0}, "value", ErrSyntax, "must be absolute"},
		{"unknown scheme", HeaderSpec{"X-Key", "${foo:x}", 0}, "value", ErrUnknownScheme, `"foo" in ${foo:x}`},
		{"no scheme", HeaderSpec{"X-Key", "${TOKEN}", 0}, "value", ErrSyntax, "${TOKEN} has no scheme"},
		{"unterminated", HeaderSpec{"X-Key", "Bearer ${env:TOKEN", 0}, "value", ErrSyntax, `unterminated "${" at byte 7`},
		{"empty env name", HeaderSpec{"X-Key", "${env:}", 0}, "value", ErrSyntax, "invalid environment variable name"},
		{"nested", HeaderSpec{"X-Key", "${env:${env:TOKEN}}", 0}, "value", ErrSyntax, "invalid environment variable name"},
		{"empty value", HeaderSpec{"X-Key", "", 0}, "value", ErrEmpty, "empty value"},
		{"crlf in env", HeaderSpec{"X-Key", "${env:NEWLINE}", 0}, "value", ErrInvalidValue, "control character once resolved"},
		{"newline in env", HeaderSpec{"X-Key", "${env:TRAILING}", 0}, "value", ErrInvalidValue, "control character"},
		{"newline in file", HeaderSpec{"X-Key", "${file:/run/secrets/inner}", 0}, "value", ErrInvalidValue, "control character"},
		{"literal ctl", HeaderSpec{"X-Key", "a\x00b", 0}, "value", ErrInvalidValue, "control character"},
		{"too long", HeaderSpec{"X-Key", strings.Repeat("${env:TOKEN}", MaxValueLen/len(testSecretValue)+1), 0}, "value", ErrInvalidValue, "longer than"},
		{"empty name", HeaderSpec{"", "v", 0}, "name", ErrInvalidName, "empty"},
		{"space in name", HeaderSpec{"X Key", "v", 0}, "name", ErrInvalidName, `contains ' '`},
		{"colon in name", HeaderSpec{":authority", "v", 0}, "name", ErrInvalidName, "RFC 7230 token"},
		{"connection", HeaderSpec{"connection", "close", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"keep-alive", HeaderSpec{"Keep-Alive", "v", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"proxy-authorization", HeaderSpec{"Proxy-Authorization", "v", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"proxy-anything", HeaderSpec{"PROXY-X", "v", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"te", HeaderSpec{"TE", "trailers", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"trailer", HeaderSpec{"Trailer", "v", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"transfer-encoding", HeaderSpec{"Transfer-Encoding", "chunked", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"upgrade", HeaderSpec{"upgrade", "websocket", 0}, "name", ErrForbiddenHeader, "hop-by-hop"},
		{"host", HeaderSpec{"Host", "evil.example", 0}, "name", ErrForbiddenHeader, "controlled by the gateway"},
		{"content-length", HeaderSpec{"content-length", "1", 0}, "name", ErrForbiddenHeader, "controlled by the gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := []HeaderSpec{{Name: "X-Ok", Value: "${env:USER}"}, tt.spec}
			_, err := Compile(specs, testOpts())
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SpecError", err)
			}
			if se.Index != 1 || se.Field != tt.field || se.Name != tt.spec.Name || se.Line != tt.spec.Line {
				t.Errorf("SpecError = %+v", se)
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.sentinel)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %q, want it to contain %q", err, tt.text)
			}
			assertNoSecret(t, err.Error())
		})
	}
}

// assertNoSecret fails if s contains any test secret value or file content.
func assertNoSecret(t *testing.T, s string) {
	t.Helper()
	for k, v := range testEnv {
		if v != "" && strings.Contains(s, strings.TrimSpace(v)) {
			t.Errorf("%q leaks env %s", s, k)
		}
	}
	for k, v := range testFiles {
		if v = strings.TrimSpace(v); v != "" && strings.Contains(s, strings.SplitN(v, "\n", 2)[0]) {
			t.Errorf("%q leaks file %s", s, k)
		}
	}
}

func TestCompileErrorText(t *testing.T) {
	_, err := Compile([]HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:MISSING}", Line: 12}}, testOpts())
	want := `transform header "Authorization" (line 12): value: unresolved reference: ${env:MISSING}: environment variable MISSING is not set`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
}

func TestCompileDuplicate(t *testing.T) {
	_, err := Compile([]HeaderSpec{
		{Name: "Authorization", Value: "a"},
		{Name: "X-Other", Value: "b"},
		{Name: "AUTHORIZATION", Value: "c"},
	}, testOpts())
	var se *SpecError
	if !errors.As(err, &se) || se.Index != 2 || se.Field != "name" || !errors.Is(err, ErrDuplicate) {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), `"AUTHORIZATION" is already set by "Authorization"`) {
		t.Errorf("err = %v", err)
	}
}

// TestCompileDuplicateAlias: names a CGI-style backend merges are one
// header; configuring both would send both.
func TestCompileDuplicateAlias(t *testing.T) {
	_, err := Compile([]HeaderSpec{
		{Name: "X-Api-Key", Value: "a"},
		{Name: "x_api_key", Value: "b"},
	}, testOpts())
	var se *SpecError
	if !errors.As(err, &se) || se.Index != 1 || !errors.Is(err, ErrDuplicate) {
		t.Fatalf("err = %#v", err)
	}
}

func TestCompileRealEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tok"), []byte("from-disk-77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOOKGATE_TEST_TOKEN", "from-env-88")
	r, err := Compile([]HeaderSpec{
		{Name: "X-A", Value: "${env:HOOKGATE_TEST_TOKEN}"},
		{Name: "X-B", Value: "${file:" + filepath.Join(dir, "tok") + "}"},
		{Name: "X-C", Value: "${file:tok}"},
	}, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h := map[string][]string{}
	r.Apply(h)
	if h["X-A"][0] != "from-env-88" || h["X-B"][0] != "from-disk-77" || h["X-C"][0] != "from-disk-77" {
		t.Fatalf("applied %q", h)
	}
	_, err = Compile([]HeaderSpec{{Name: "X-A", Value: "${file:" + dir + "/missing}"}}, Options{})
	if !errors.Is(err, ErrUnresolved) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err = %v", err)
	}
	_, err = Compile([]HeaderSpec{{Name: "X-A", Value: "${file:" + dir + "}"}}, Options{})
	if !errors.Is(err, ErrUnresolved) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("err = %v", err)
	}
}

func TestRulesAccessors(t *testing.T) {
	r := mustCompile(t, []HeaderSpec{
		{Name: "x-api-key", Value: "${env:TOKEN}"},
		{Name: "Authorization", Value: "Bearer ${env:TOKEN}"},
		{Name: "accept", Value: "application/json"},
	})
	if got, want := r.Names(), []string{"Accept", "Authorization", "X-Api-Key"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
	wantRefs := map[string]string{"X-Api-Key": "${env:TOKEN}", "Authorization": "Bearer ${env:TOKEN}", "Accept": "application/json"}
	if got := r.References(); !reflect.DeepEqual(got, wantRefs) {
		t.Errorf("References = %q", got)
	}
	if got, want := revealAll(r.Secrets()), []string{"Bearer " + testSecretValue, testSecretValue}; !reflect.DeepEqual(got, want) {
		t.Errorf("Secrets = %q, want %q", got, want)
	}
	// Callers' copies do not alias the Rules.
	r.Names()[0] = "mutated"
	r.References()["Accept"] = "mutated"
	if r.Names()[0] != "Accept" || r.References()["Accept"] != "application/json" {
		t.Error("accessors return aliases")
	}
	if got := r.String(); got != "transform.Rules[Accept Authorization X-Api-Key]" {
		t.Errorf("String = %q", got)
	}

	var nilRules *Rules
	if nilRules.Names() != nil || nilRules.Secrets() != nil || len(nilRules.References()) != 0 || nilRules.Scrubber() != nil {
		t.Error("nil Rules accessors")
	}
	empty := mustCompile(t, nil)
	if empty.Names() != nil || empty.Scrubber() != nil {
		t.Error("empty Rules")
	}
}

// TestEnvNames: the variables a transform reads secrets from, as the
// resolver sees them: "$$" is a literal "$", so "$${env:X}" is text and
// "$$${env:X}" is a "$" followed by a reference.
func TestEnvNames(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   []string
	}{
		{[]string{"${env:TOKEN}"}, []string{"TOKEN"}},
		{[]string{"Bearer ${env:TOKEN}", "${env:USER}:${env:TOKEN}"}, []string{"TOKEN", "USER"}},
		{[]string{"$${env:TOKEN}"}, nil},
		{[]string{"$$${env:TOKEN}"}, []string{"TOKEN"}},
		{[]string{"$$$${env:TOKEN}"}, nil},
		{[]string{"a$b ${file:/run/secrets/token}"}, nil},
		{[]string{"${file:/run/secrets/token}", "$x${env:USER}"}, []string{"USER"}},
		{[]string{"application/json"}, nil},
	} {
		specs := make([]HeaderSpec, len(c.values))
		for i, v := range c.values {
			specs[i] = HeaderSpec{Name: "X-H" + strings.Repeat("x", i), Value: v}
		}
		r := mustCompile(t, specs)
		if got := r.EnvNames(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: EnvNames = %q, want %q", c.values, got, c.want)
		}
	}
	r := mustCompile(t, []HeaderSpec{{Name: "X-A", Value: "${env:TOKEN}"}})
	r.EnvNames()[0] = "mutated"
	if r.EnvNames()[0] != "TOKEN" {
		t.Error("EnvNames returns an alias")
	}
	var nilRules *Rules
	if nilRules.EnvNames() != nil {
		t.Error("nil Rules: EnvNames")
	}
}
