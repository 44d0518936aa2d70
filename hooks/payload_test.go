package hooks

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestConvertPayloadKeepsBytes: only the two top-level names change; nested
// members of the same name, escapes, spacing and unknown fields stay.
func TestConvertPayloadKeepsBytes(t *testing.T) {
	in := `{ "tool_call" : {"name":"x","args":{"tool_call":1,"environment_id":"n"}},"environment_id":"e\u0041", "error":"" ,"other":[{"tool_call":2}]}`
	want := `{ "toolCall" : {"name":"x","args":{"tool_call":1,"environment_id":"n"}},"conversationId":"e\u0041", "error":"" ,"other":[{"tool_call":2}]}`
	got, err := convertPayload([]byte(in), DialectRemote, DialectCLI)
	if err != nil || string(got) != want {
		t.Fatalf("got %s (%v)\nwant %s", got, err, want)
	}
	back, err := convertPayload(got, DialectCLI, DialectRemote)
	if err != nil || string(back) != in {
		t.Fatalf("back: %s (%v)", back, err)
	}
	// The caller's own member of the target name wins: no duplicate keys.
	both := `{"tool_call":{"name":"a"},"toolCall":{"name":"b"}}`
	if got, _ := convertPayload([]byte(both), DialectRemote, DialectCLI); string(got) != both {
		t.Fatalf("collision: %s", got)
	}
}

// FuzzPayload: the scanner never panics, and on a valid JSON object the
// conversion and the args rewrite give valid JSON, and converting there
// and back gives the input.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{
		`{"tool_call": {"name": "x", "args": {"a": 1}}, "environment_id": "e"}`,
		`{"toolCall": {"name": "x", "args": "str"}, "conversationId": "c", "x": [1, {"y": "}"}]}`,
		`{"toolCall": {"name": "x"}}`, `{}`, `{"a":"\"}"}`, `[1]`, `{"a":tru`, `{"a" 1}`, `{"toolCall": 5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		over := []rawMember{{key: "k", val: []byte(`"v"`)}}
		for _, d := range []Dialect{DialectRemote, DialectCLI} {
			out, err := convertPayload(data, d, otherDialect(d))
			_, _ = withArgs(data, d, over)
			var top map[string]json.RawMessage
			if json.Unmarshal(data, &top) != nil || top == nil {
				continue
			}
			if err != nil || !json.Valid(out) {
				t.Fatalf("convert %q: %q, %v", data, out, err)
			}
			if _, hasCall := top[keysOf(d).call]; hasCall {
				if w, err := withArgs(data, d, over); err == nil && !json.Valid(w) {
					t.Fatalf("withArgs %q: %q", data, w)
				}
			}
			// There and back is the identity when the input has none of the
			// target dialect's names, and each of its own at most once.
			src, dst := keysOf(d), keysOf(otherDialect(d))
			clean := bytes.Count(data, []byte(src.call)) <= 1 && bytes.Count(data, []byte(src.env)) <= 1 &&
				!bytes.Contains(data, []byte(dst.call)) && !bytes.Contains(data, []byte(dst.env))
			if clean {
				if back, err := convertPayload(out, otherDialect(d), d); err != nil || !bytes.Equal(back, data) {
					t.Fatalf("round trip %q → %q → %q", data, out, back)
				}
			}
		}
	})
}

// FuzzSetEnabled: on any input SetEnabled never panics; on a file it
// edits, the result still parses, the group's flag is what was asked, and
// the bytes outside the edit are those of the input.
func FuzzSetEnabled(f *testing.F) {
	f.Add([]byte(`{"g": {"Stop": []}}`), "g", false)
	f.Add([]byte("{\n  \"g\": {\n    \"enabled\": true,\n    \"Stop\": []\n  }\n}\n"), "g", false)
	f.Add([]byte(`{"g": {"enabled": "no"}}`), "g", true)
	f.Add([]byte(`{"g": {}}`), "g", false)
	f.Add([]byte(`{"g": 1}`), "g", false)
	f.Fuzz(func(t *testing.T, data []byte, key string, enabled bool) {
		out, changed, err := SetEnabled(data, key, enabled)
		if err != nil || !changed {
			return
		}
		groups, _ := compileFile("f.json", out)
		for _, g := range groups {
			if g.Key == key {
				if g.Enabled != enabled {
					t.Fatalf("%q → %q: enabled = %v", data, out, g.Enabled)
				}
				break
			}
		}
		// Outside the edit the bytes are the input's: a common prefix and
		// suffix cover all of the input but the old value.
		p := 0
		for p < len(data) && p < len(out) && data[p] == out[p] {
			p++
		}
		s := 0
		for s < len(data)-p && s < len(out)-p && data[len(data)-1-s] == out[len(out)-1-s] {
			s++
		}
		if removed := data[p : len(data)-s]; len(removed) > len(`"enabled"`) && !json.Valid(removed) {
			t.Fatalf("%q → %q: removed %q", data, out, removed)
		}
	})
}
