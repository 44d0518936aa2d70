package transform

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestTextScrubber(t *testing.T) {
	a := mustCompile(t, []HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:TOKEN}"}})
	b := mustCompile(t, []HeaderSpec{{Name: "X-Api-Key", Value: "${env:USER}"}})
	ts := NewTextScrubber(nil, a, b)
	secret := []byte(testSecretValue)
	forms := map[string]string{
		"raw":        testSecretValue,
		"whole":      "Bearer " + testSecretValue,
		"other rule": "u-7f3a9c",
		"base64":     base64.StdEncoding.EncodeToString(secret),
		"base64 raw": base64.RawStdEncoding.EncodeToString(secret),
		"base64 url": base64.URLEncoding.EncodeToString(secret),
		"hex":        hex.EncodeToString(secret),
		"HEX":        strings.ToUpper(hex.EncodeToString(secret)),
	}
	for name, form := range forms {
		got := ts.Text(`malformed header "` + form + `" at byte 3`)
		if strings.Contains(got, form) || !strings.Contains(got, "[redacted]") || !strings.HasPrefix(got, `malformed header "`) {
			t.Errorf("%s: not scrubbed: %s", name, strings.ReplaceAll(got, testSecretValue, "<S>"))
		}
	}
	if got := ts.Text("nothing to hide"); got != "nothing to hide" {
		t.Errorf("clean text changed: %q", got)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", ts, ts, ts, ts); strings.Contains(s, testSecretValue) || strings.Contains(s, "u-7f3a9c") {
		t.Error("printing a TextScrubber shows a secret")
	}
}

func TestTextScrubberNil(t *testing.T) {
	if NewTextScrubber() != nil || NewTextScrubber(nil, mustCompile(t, []HeaderSpec{{Name: "X-Team", Value: "literal"}})) != nil {
		t.Fatal("no secrets must give a nil scrubber")
	}
	var ts *TextScrubber
	if ts.Text("x") != "x" || ts.String() == "" {
		t.Fatal("a nil TextScrubber must change nothing")
	}
}

// TestTextScrubberJSONForm: a secret holding '"' or '\' is found in JSON
// text too, where it appears escaped.
func TestTextScrubberJSONForm(t *testing.T) {
	const odd = `tok"en\with-quotes`
	r, err := Compile([]HeaderSpec{{Name: "X-Key", Value: "${env:ODD}"}}, Options{LookupEnv: func(string) (string, bool) { return odd, true }})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"reason": "echoed " + odd})
	got := NewTextScrubber(r).Text(string(b))
	if strings.Contains(got, `tok\"en`) || !strings.Contains(got, "echoed [redacted]") {
		t.Fatalf("JSON form not scrubbed: %d bytes left", len(got))
	}
}
