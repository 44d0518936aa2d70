package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// jsonKind is the type of a decoded JSON value.
type jsonKind int

const (
	kindNull jsonKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// node is a JSON value with the byte offset where it starts. Objects keep
// their members in file order (group order matters) and duplicates.
type node struct {
	kind    jsonKind
	off     int64
	end     int64 // the offset just after the value
	b       bool
	num     json.Number
	str     string
	arr     []*node
	members []member
}

type member struct {
	key    string
	keyOff int64
	val    *node
}

// parseJSON decodes exactly one JSON value from data, keeping positions.
func parseJSON(data []byte) (*node, error) {
	// Syntax first, with json.Unmarshal: its error offsets are exact, while
	// a Decoder's can point into its buffer rather than at the culprit.
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off := se.Offset - 1 // Offset counts the offending byte
			if off < 0 {
				off = 0
			}
			msg := "invalid JSON: " + se.Error()
			if se.Offset >= int64(len(bytes.TrimRight(data, " \t\r\n"))) {
				off, msg = int64(len(data)), "invalid JSON: unexpected end of file"
			}
			return nil, &posError{off: off, msg: msg}
		}
	}
	p := &jsonParser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	n, err := p.value()
	if err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &posError{off: p.start(p.dec.InputOffset()), msg: "unexpected data after the top-level value"}
	}
	return n, nil
}

type jsonParser struct {
	data []byte
	dec  *json.Decoder
}

// posError is a syntax error at a byte offset.
type posError struct {
	off int64
	msg string
}

func (e *posError) Error() string { return e.msg }

// start skips whitespace and separators from off to where the next token
// begins: json.Decoder reports the offset just after the previous token.
func (p *jsonParser) start(off int64) int64 {
	for off < int64(len(p.data)) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
		default:
			return off
		}
	}
	return off
}

func (p *jsonParser) token() (json.Token, int64, error) {
	off := p.start(p.dec.InputOffset())
	tok, err := p.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, se.Offset, &posError{off: se.Offset, msg: "invalid JSON: " + se.Error()}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, int64(len(p.data)), &posError{off: int64(len(p.data)), msg: "invalid JSON: unexpected end of file"}
		}
		return nil, off, &posError{off: off, msg: "invalid JSON: " + err.Error()}
	}
	return tok, off, nil
}

func (p *jsonParser) value() (*node, error) {
	tok, off, err := p.token()
	if err != nil {
		return nil, err
	}
	return p.valueFrom(tok, off)
}

func (p *jsonParser) valueFrom(tok json.Token, off int64) (*node, error) {
	n := &node{off: off}
	switch t := tok.(type) {
	case nil:
		n.kind = kindNull
	case bool:
		n.kind, n.b = kindBool, t
	case json.Number:
		n.kind, n.num = kindNumber, t
	case string:
		n.kind, n.str = kindString, t
	case json.Delim:
		switch t {
		case '[':
			n.kind = kindArray
			for p.dec.More() {
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, v)
			}
			if _, _, err := p.token(); err != nil { // ']'
				return nil, err
			}
		case '{':
			n.kind = kindObject
			for p.dec.More() {
				kt, koff, err := p.token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, member{key: key, keyOff: koff, val: v})
			}
			if _, _, err := p.token(); err != nil { // '}'
				return nil, err
			}
		default:
			return nil, &posError{off: off, msg: fmt.Sprintf("invalid JSON: unexpected %q", t)}
		}
	}
	n.end = p.dec.InputOffset()
	return n, nil
}

// lineCol converts a byte offset into a 1-based line and column.
func lineCol(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	prefix := data[:off]
	line = bytes.Count(prefix, []byte{'\n'}) + 1
	col = int(off) - (bytes.LastIndexByte(prefix, '\n') + 1) + 1
	return line, col
}
