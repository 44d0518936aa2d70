package srcpos

import "testing"

func TestErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  Error
		want string
	}{
		// The config file's forms: no column, no severity.
		{Error{File: "gw.yaml", Msg: "larger than 1 MiB"}, "gw.yaml: larger than 1 MiB"},
		{Error{File: "gw.yaml", Line: 3, Msg: "JSON syntax error"}, "gw.yaml:3: JSON syntax error"},
		{Error{File: "gw.yaml", Line: 7, Field: "network.allowlist[2].domain", Msg: "empty"},
			"gw.yaml:7: network.allowlist[2].domain: empty"},
		{Error{File: "gw.yaml", Field: "ca", Msg: "no such file"}, "gw.yaml: ca: no such file"},
		// hooks.json's forms: column, severity and hint.
		{Error{File: "h.json", Line: 4, Column: 19, Severity: SeverityError, Field: "g.matcher", Msg: "invalid", Hint: "write .*"},
			"h.json:4:19: error: g.matcher: invalid (hint: write .*)"},
		{Error{File: "h.json", Severity: SeverityWarning, Msg: "no root"}, "h.json: warning: no root"},
		// A column without a line is never written.
		{Error{File: "h.json", Column: 5, Severity: SeverityError, Msg: "x"}, "h.json: error: x"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

func TestErrorsText(t *testing.T) {
	es := Errors{{File: "a", Line: 1, Msg: "one"}, {File: "a", Line: 2, Field: "f", Msg: "two"}}
	if got, want := es.Error(), "a:1: one\na:2: f: two"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestHasErrors(t *testing.T) {
	warning := &Error{Severity: SeverityWarning}
	for _, tc := range []struct {
		es   Errors
		want bool
	}{
		{nil, false},
		{Errors{warning}, false},
		{Errors{warning, {Severity: SeverityError}}, true},
		{Errors{{}}, true}, // no severity: an error, as in config's lists
	} {
		if got := tc.es.HasErrors(); got != tc.want {
			t.Errorf("%v: HasErrors = %v, want %v", tc.es, got, tc.want)
		}
	}
}
