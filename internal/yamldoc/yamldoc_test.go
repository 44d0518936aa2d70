package yamldoc

import (
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, file, data, want string // want: the first error, "" for none
	}{
		{"yaml", "a.yaml", "a: 1\nb: [x, y]\n", ""},
		{"flow mapping that is not JSON", "a.yaml", "{a: 1}\n", ""},
		{"empty", "a.yaml", "", ""},
		{"tab", "a.yaml", "a:\n\tb: 1\n", "a.yaml:2: a tab character in the indentation; YAML indents with spaces only"},
		{"two documents", "a.yaml", "a: 1\n---\nb: 2\n", "a.yaml:2: more than one YAML document; the file holds exactly one"},
		{"json by name", "a.json", "{\n  \"a\": 1,\n}\n", "a.json:3: JSON syntax error: invalid character '}' looking for beginning of object key string"},
		{"json by look", "a.conf", "{\n\"a\": [1,\n}\n", "a.conf:3: JSON syntax error: invalid character '}' looking for beginning of value"},
		{"yaml syntax", "a.yaml", "a: [1\n", "a.yaml:1: did not find expected ',' or ']'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, errs := Parse(tc.file, []byte(tc.data))
			switch {
			case tc.want == "" && errs != nil:
				t.Fatalf("errors: %v", errs)
			case tc.want == "" && root == nil:
				t.Fatal("no tree and no error")
			case tc.want != "" && (len(errs) == 0 || errs[0].Error() != tc.want):
				t.Fatalf("errors = %v\nwant first %q", errs, tc.want)
			}
		})
	}
}

func TestParseEmptyIsNoDocument(t *testing.T) {
	root, errs := Parse("a.yaml", nil)
	if errs != nil || root.Kind != 0 {
		t.Fatalf("root kind %v, errors %v; want an empty node", root.Kind, errs)
	}
}

func TestDescribe(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("[5, true, ~, \"s\", 1.5, {a: 1}, [1], 2001-01-01]"), &doc); err != nil {
		t.Fatal(err)
	}
	want := []string{"the number 5", "the boolean true", "null (an empty value)", `the string "s"`, "the number 1.5", "a mapping", "a list", "2001-01-01 (timestamp)"}
	for i, n := range doc.Content[0].Content {
		if got := Describe(n); got != want[i] {
			t.Errorf("Describe(%s) = %q, want %q", n.Value, got, want[i])
		}
	}
}
