package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
)

// The byte-level surgery on event payloads: renaming the top-level members
// that differ between the dialects, and rewriting a tool call's args after
// a PreToolUse "overwrite". Both keep every other byte of the caller's JSON
// as it was, and both are a single pass over the bytes (no decoding into
// maps), which keeps a 10 KiB payload's conversion in the microseconds.
// Payloads reaching here are valid JSON objects (ParseEvent, NewEvent and
// the answer parser check that); the scanner still bounds every index, so
// a malformed payload is an error, never a panic.

// rawMember is one member of a JSON object: its key and its raw value.
type rawMember struct {
	key string
	val []byte
}

// memberSpan locates one member of an object in the source bytes.
type memberSpan struct {
	key              string
	keyStart, keyEnd int // the quoted key
	valStart, valEnd int // the raw value
}

var errMalformed = errors.New("malformed JSON object")

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at data[i] ('"').
// It jumps from quote to quote (IndexByte is vectorised), so a long string
// costs little; a quote preceded by an odd number of backslashes is
// escaped.
func skipString(data []byte, i int) (int, error) {
	j := i + 1
	for j <= len(data) {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		n := 0
		for b := q - 1; b > i && data[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
	return 0, errMalformed
}

// skipValue returns the index after the value starting at data[i].
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, errMalformed
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				end, err := skipString(data, i)
				if err != nil {
					return 0, err
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errMalformed
	}
	start := i
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if i == start {
				return 0, errMalformed
			}
			return i, nil
		}
		i++
	}
	if i == start {
		return 0, errMalformed
	}
	return i, nil
}

// scanObject returns the members of the object that starts at the first
// non-space byte of data.
func scanObject(data []byte) ([]memberSpan, error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, errMalformed
	}
	spans := make([]memberSpan, 0, 8)
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return spans, nil
	}
	for i < len(data) {
		if data[i] != '"' {
			return nil, errMalformed
		}
		s := memberSpan{keyStart: i}
		end, err := skipString(data, i)
		if err != nil {
			return nil, err
		}
		s.keyEnd = end
		raw := data[i+1 : end-1]
		if bytes.IndexByte(raw, '\\') < 0 {
			s.key = string(raw)
		} else if err := json.Unmarshal(data[i:end], &s.key); err != nil {
			return nil, errMalformed
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil, errMalformed
		}
		i = skipSpace(data, i+1)
		s.valStart = i
		if i, err = skipValue(data, i); err != nil {
			return nil, err
		}
		s.valEnd = i
		spans = append(spans, s)
		i = skipSpace(data, i)
		if i >= len(data) {
			break
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return spans, nil
		default:
			return nil, errMalformed
		}
	}
	return nil, errMalformed
}

// objectMembers decodes an object into its members, values raw.
func objectMembers(data []byte) ([]rawMember, error) {
	spans, err := scanObject(data)
	if err != nil {
		return nil, err
	}
	ms := make([]rawMember, len(spans))
	for i, s := range spans {
		ms[i] = rawMember{key: s.key, val: data[s.valStart:s.valEnd]}
	}
	return ms, nil
}

// encodeObject writes members as a compact JSON object.
func encodeObject(ms []rawMember) []byte {
	n := 2
	for _, m := range ms {
		n += len(m.key) + len(m.val) + 4
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(m.key)
		out = append(out, k...)
		out = append(out, ':')
		out = append(out, m.val...)
	}
	return append(out, '}')
}

// splice replaces data[start:end] with repl, in a new slice.
func splice(data []byte, start, end int, repl []byte) []byte {
	out := make([]byte, 0, len(data)-(end-start)+len(repl))
	out = append(out, data[:start]...)
	out = append(out, repl...)
	return append(out, data[end:]...)
}

// convertPayload returns payload, an event in dialect from, as dialect to
// sees it: "tool_call" ↔ "toolCall" and "environment_id" ↔
// "conversationId" renamed at the top level, every other byte unchanged.
// A member is not renamed when the payload already has one of the target
// name (the caller's own member wins).
func convertPayload(payload []byte, from, to Dialect) ([]byte, error) {
	if from == to {
		return payload, nil
	}
	spans, err := scanObject(payload)
	if err != nil {
		return nil, err
	}
	src, dst := keysOf(from), keysOf(to)
	has := func(key string) bool {
		return slices.ContainsFunc(spans, func(s memberSpan) bool { return s.key == key })
	}
	out := make([]byte, 0, len(payload)+8)
	last := 0
	for _, s := range spans {
		var to string
		switch s.key {
		case src.call:
			to = dst.call
		case src.env:
			to = dst.env
		default:
			continue
		}
		if has(to) {
			continue
		}
		out = append(out, payload[last:s.keyStart]...)
		out = append(out, '"')
		out = append(out, to...)
		out = append(out, '"')
		last = s.keyEnd
	}
	return append(out, payload[last:]...), nil
}

// withArgs returns payload (an event in dialect d) with its tool call's
// args shallow-merged with overwrite: each overwritten member keeps its
// place, new ones are appended. The rest of the payload is unchanged.
func withArgs(payload []byte, d Dialect, overwrite []rawMember) ([]byte, error) {
	if len(overwrite) == 0 {
		return payload, nil
	}
	top, err := scanObject(payload)
	if err != nil {
		return nil, err
	}
	callKey := keysOf(d).call
	for _, t := range top {
		if t.key != callKey {
			continue
		}
		call := payload[t.valStart:t.valEnd]
		newCall, err := mergeMember(call, "args", overwrite)
		if err != nil {
			return nil, err
		}
		return splice(payload, t.valStart, t.valEnd, newCall), nil
	}
	return nil, errors.New("no tool call in the payload")
}

// mergeMember returns obj with its member key (an object, or {} when
// missing or not an object) shallow-merged with overwrite.
func mergeMember(obj []byte, key string, overwrite []rawMember) ([]byte, error) {
	spans, err := scanObject(obj)
	if err != nil {
		return nil, err
	}
	for _, s := range spans {
		if s.key != key {
			continue
		}
		cur, err := objectMembers(obj[s.valStart:s.valEnd])
		if err != nil {
			cur = nil // args that are not an object are replaced
		}
		return splice(obj, s.valStart, s.valEnd, encodeObject(mergeMembers(cur, overwrite))), nil
	}
	// No such member: add it before the closing brace.
	i := bytes.LastIndexByte(obj, '}')
	add := []byte(`"` + key + `":`)
	if len(spans) > 0 {
		add = append([]byte{','}, add...)
	}
	add = append(add, encodeObject(overwrite)...)
	return splice(obj, i, i, add), nil
}

// mergeMembers is the shallow merge: base's members in order, each
// replaced by over's value for the same key, then over's new keys.
func mergeMembers(base, over []rawMember) []rawMember {
	out := make([]rawMember, 0, len(base)+len(over))
	idx := make(map[string]int, len(base)+len(over))
	for _, m := range base {
		if i, dup := idx[m.key]; dup {
			out[i] = m
			continue
		}
		idx[m.key] = len(out)
		out = append(out, m)
	}
	for _, m := range over {
		if i, ok := idx[m.key]; ok {
			out[i].val = m.val
			continue
		}
		idx[m.key] = len(out)
		out = append(out, m)
	}
	return out
}
