package transform

import (
	"fmt"
	"log/slog"
)

// redacted is what every printed form of a Secret shows.
const redacted = "[redacted]"

// Secret holds a resolved credential. Every way of printing it yields
// "[redacted]": String, GoString, Format (every fmt verb, including %#v, %x
// and %q), MarshalJSON (and so zerolog's Interface and Any, and
// encoding/json inside any struct), MarshalText (map keys, encoding/xml,
// YAML encoders) and slog's LogValue. Reveal is the only way to the value.
//
// The value lives behind a pointer, so that even reflection-based printing
// of a struct that holds a Secret in an unexported field (where fmt cannot
// call methods) prints an address, not the credential.
//
// The zero Secret is empty and also prints "[redacted]".
type Secret struct {
	v *string
}

// newSecret wraps s.
func newSecret(s string) Secret { return Secret{v: &s} }

// Reveal returns the credential. It is the only way to the value: grep for
// Reveal to audit every use.
func (s Secret) Reveal() string {
	if s.v == nil {
		return ""
	}
	return *s.v
}

// Len reports the length of the value in bytes (for sizing; it says nothing
// about the content).
func (s Secret) Len() int { return len(s.Reveal()) }

// String implements fmt.Stringer (and so zerolog's Stringer).
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return redacted }

// Format implements fmt.Formatter: every verb and flag prints "[redacted]".
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON implements json.Marshaler: the JSON string "[redacted]".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

var (
	_ fmt.Stringer   = Secret{}
	_ fmt.GoStringer = Secret{}
	_ fmt.Formatter  = Secret{}
	_ slog.LogValuer = Secret{}
)
