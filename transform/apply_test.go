package transform

import (
	"net/http"
	"reflect"
	"testing"
)

func TestApply(t *testing.T) {
	r := mustCompile(t, []HeaderSpec{
		{Name: "Authorization", Value: "Bearer ${env:TOKEN}"},
		{Name: "x-api-key", Value: "${env:USER}"},
	})
	tests := []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{
			name: "empty",
			in:   http.Header{},
			want: http.Header{"Authorization": {"Bearer " + testSecretValue}, "X-Api-Key": {"u-7f3a9c"}},
		},
		{
			name: "client copies in any case and count",
			in: http.Header{
				"Authorization": {"Bearer sandbox-fake", "Basic second"},
				"authorization": {"lower"},
				"AUTHORIZATION": {"upper"},
				"X-API-KEY":     {"k"},
				"x-api-key":     {"k2"},
				"Accept":        {"*/*"},
			},
			want: http.Header{
				"Authorization": {"Bearer " + testSecretValue},
				"X-Api-Key":     {"u-7f3a9c"},
				"Accept":        {"*/*"},
			},
		},
		{
			name: "aliases with underscores, any case",
			in: http.Header{
				"X_api_key":     {"attacker"},
				"X_API_KEY":     {"attacker2"},
				"x-api_key":     {"attacker3"},
				"Authorization": {"fake"},
				"X-Api-Keys":    {"kept: a longer name"},
				"X.Api.Key":     {"kept: '.' is not an alias"},
			},
			want: http.Header{
				"Authorization": {"Bearer " + testSecretValue},
				"X-Api-Key":     {"u-7f3a9c"},
				"X-Api-Keys":    {"kept: a longer name"},
				"X.Api.Key":     {"kept: '.' is not an alias"},
			},
		},
		{
			name: "hop-by-hop and proxy headers",
			in: http.Header{
				"Connection":          {"keep-alive, X-Secret-Hop", "x-other-hop"},
				"connection":          {"X-Lower-Conn"},
				"Keep-Alive":          {"timeout=5"},
				"Proxy-Authorization": {"Basic Zm9v"},
				"proxy-connection":    {"keep-alive"},
				"Proxy-Foo":           {"bar"},
				"Te":                  {"gzip"},
				"Trailer":             {"X-T"},
				"Transfer-Encoding":   {"chunked"},
				"upgrade":             {"websocket"},
				"X-Secret-Hop":        {"1"},
				"X-Other-Hop":         {"2"},
				"x-lower-conn":        {"3"},
				"X-Kept":              {"4"},
				"Proxyish":            {"5"},
			},
			want: http.Header{
				"Authorization": {"Bearer " + testSecretValue},
				"X-Api-Key":     {"u-7f3a9c"},
				"X-Kept":        {"4"},
				"Proxyish":      {"5"},
			},
		},
		{
			name: "te trailers is kept",
			in:   http.Header{"TE": {"gzip, Trailers;q=1", "deflate"}, "te": {"trailers"}},
			want: http.Header{
				"Te":            {"trailers"},
				"Authorization": {"Bearer " + testSecretValue},
				"X-Api-Key":     {"u-7f3a9c"},
			},
		},
		{
			name: "connection naming a configured header",
			in:   http.Header{"Connection": {"Authorization"}, "Authorization": {"x"}},
			want: http.Header{"Authorization": {"Bearer " + testSecretValue}, "X-Api-Key": {"u-7f3a9c"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.Apply(tt.in)
			if !reflect.DeepEqual(tt.in, tt.want) {
				t.Errorf("got  %q\nwant %q", tt.in, tt.want)
			}
		})
	}
}

func TestApplyDoesNotAliasRules(t *testing.T) {
	r := mustCompile(t, []HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:TOKEN}"}})
	h1, h2 := http.Header{}, http.Header{}
	r.Apply(h1)
	h1["Authorization"][0] = "mutated"
	r.Apply(h2)
	if h2.Get("Authorization") != "Bearer "+testSecretValue {
		t.Fatal("Apply shares value slices across requests")
	}
}

func TestApplyNilRules(t *testing.T) {
	var r *Rules
	h := http.Header{"Proxy-Authorization": {"x"}, "Accept": {"a"}}
	r.Apply(h)
	if !reflect.DeepEqual(h, http.Header{"Accept": {"a"}}) {
		t.Fatalf("got %q", h)
	}
}

// TestApplyAllocs: Apply allocates only the value slices it sets.
func TestApplyAllocs(t *testing.T) {
	r := mustCompile(t, []HeaderSpec{
		{Name: "Authorization", Value: "Bearer ${env:TOKEN}"},
		{Name: "X-Api-Key", Value: "${env:USER}"},
	})
	h := http.Header{
		"Accept": {"*/*"}, "User-Agent": {"curl"}, "Connection": {"keep-alive, X-Hop"},
		"Authorization": {"fake"}, "authorization": {"fake2"},
	}
	allocs := testing.AllocsPerRun(100, func() {
		h["Connection"] = []string{"keep-alive, X-Hop"}
		h["authorization"] = []string{"fake2"}
		r.Apply(h)
	})
	// 2 for the test's own slices, 2 for the values Apply sets.
	if allocs > 4 {
		t.Errorf("allocs per Apply = %v, want ≤ 4 (2 of them the test's)", allocs)
	}
}

func BenchmarkApply(b *testing.B) {
	r := mustCompile(b, []HeaderSpec{
		{Name: "Authorization", Value: "Bearer ${env:TOKEN}"},
		{Name: "X-Api-Key", Value: "${env:USER}"},
	})
	base := http.Header{
		"Accept": {"*/*"}, "User-Agent": {"curl/8"}, "Accept-Encoding": {"gzip"},
		"Content-Type": {"application/json"}, "Authorization": {"fake"}, "Connection": {"keep-alive"},
	}
	b.ReportAllocs()
	for b.Loop() {
		h := make(http.Header, 8)
		for k, v := range base {
			h[k] = v
		}
		r.Apply(h)
	}
}

func TestSameHeaderName(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"X-Api-Key", "X-Api-Key", true},
		{"X-Api-Key", "x_api_key", true},
		{"X_API_KEY", "x-api-key", true},
		{"Authorization", "AUTHORIZATION", true},
		{"X-Api-Key", "X-Api-Keys", false},
		{"X-Api-Key", "X.Api.Key", false},
		{"X-Api-Key", "X Api Key", false},
		{"", "", true},
		{"-", "_", true},
		{"@", "`", false}, // 0x40/0x60: folding only letters
		{"[", "{", false},
	}
	for _, tt := range tests {
		if got := SameHeaderName(tt.a, tt.b); got != tt.want {
			t.Errorf("SameHeaderName(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
