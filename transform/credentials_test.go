package transform

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func credOpts() Options {
	return Options{LookupEnv: func(name string) (string, bool) {
		v := map[string]string{"PASS": "p4ss-canary", "KEY": "k/y canary+="}[name]
		return v, v != ""
	}}
}

func TestBasicCredential(t *testing.T) {
	r, err := CompileSpec(Spec{Basic: &BasicSpec{Username: "agent", Password: "${env:PASS}"}}, credOpts())
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Authorization": {"Basic c2FuZGJveA=="}, "authorization": {"x"}}
	r.Apply(h)
	req := &http.Request{Header: h}
	user, pass, ok := req.BasicAuth()
	if !ok || user != "agent" || pass != "p4ss-canary" || len(h) != 1 {
		t.Fatalf("Authorization not set to the Basic credentials (ok %v, user %q, %d headers)", ok, user, len(h))
	}
	enc := base64.StdEncoding.EncodeToString([]byte("agent:p4ss-canary"))
	var got []string
	for _, s := range r.Secrets() {
		got = append(got, s.Reveal())
	}
	for _, want := range []string{"p4ss-canary", "agent:p4ss-canary", enc, "Basic " + enc} {
		if !strings.Contains("|"+strings.Join(got, "|")+"|", "|"+want+"|") {
			t.Errorf("a form of the Basic credentials is not a secret (%d secrets)", len(got))
		}
	}
	if out := NewTextScrubber(r).Text("a " + enc + " b " + base64.RawURLEncoding.EncodeToString([]byte("p4ss-canary"))); strings.Contains(out, "p4ss") || strings.Contains(out, enc) {
		t.Error("the text scrubber misses the Basic credentials")
	}
	if s := r.String() + r.Scrubber().String(); strings.Contains(s, "p4ss") {
		t.Error("printing the rules shows the password")
	}
	if !r.HasBasic() {
		t.Error("HasBasic is false")
	}
	_, err = CompileSpec(Spec{Headers: []HeaderSpec{{Name: "authorization", Value: "x"}}, Basic: &BasicSpec{Username: "a", Password: "b"}}, credOpts())
	var ce *CredentialError
	if !errors.As(err, &ce) || !errors.Is(err, ErrDuplicate) {
		t.Errorf("basic next to a transform Authorization: got %v", err)
	}
}

func TestQueryCredential(t *testing.T) {
	r, err := CompileSpec(Spec{Query: []ParamSpec{{Name: "api_key", Value: "${env:KEY}"}, {Name: "v", Value: "2"}}}, credOpts())
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"":                                  "api_key=k%2Fy+canary%2B%3D&v=2",
		"a=1&api_key=mine&b=2":              "a=1&b=2&api_key=k%2Fy+canary%2B%3D&v=2",
		"API_KEY=x&api%5Fkey=y&x=1;api_key": "api_key=k%2Fy+canary%2B%3D&v=2",
		"a=%zz&&V=9":                        "a=%zz&api_key=k%2Fy+canary%2B%3D&v=2",
	} {
		u := &url.URL{Path: "/", RawQuery: in}
		r.ApplyQuery(u)
		if u.RawQuery != want {
			t.Errorf("ApplyQuery(%q) = %q, want %q", in, u.RawQuery, want)
		}
	}
	if got := strings.Join(r.QueryNames(), ","); got != "api_key,v" {
		t.Errorf("QueryNames = %q", got)
	}
	echo := "GET /?api_key=" + url.QueryEscape("k/y canary+=") + " path " + url.PathEscape("k/y canary+=") + " raw k/y canary+="
	if out := r.Scrubber().Replace(echo); strings.Contains(out, "canary") {
		t.Errorf("an echoed query value is not scrubbed: %q", out)
	}
	for _, bad := range []Spec{
		{Query: []ParamSpec{{Name: "", Value: "x"}}},
		{Query: []ParamSpec{{Name: "k", Value: "x"}, {Name: "K", Value: "y"}}},
		{Query: []ParamSpec{{Name: "k", Value: "${env:UNSET}"}}},
	} {
		var ce *CredentialError
		if _, err := CompileSpec(bad, credOpts()); !errors.As(err, &ce) || ce.Kind != "query" {
			t.Errorf("%+v: got %v", bad.Query, err)
		}
	}
}
