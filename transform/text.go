package transform

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// TextScrubber removes secrets from free text the gateway writes itself:
// the reasons of its answers and decision lines, and what the admin API
// serves. It is the last line of defence behind reasons that are built
// never to quote what a peer sent, so it looks for more than the Scrubber
// of response bodies does: each secret as it is, and its base64 (standard
// and URL alphabets, padded or not) and hex (either case) encodings. A nil
// *TextScrubber is valid and changes nothing.
type TextScrubber struct {
	s *Scrubber
}

// NewTextScrubber returns the scrubber for the secrets of every rules given
// (nil entries are skipped), or nil when there are none.
func NewTextScrubber(rules ...*Rules) *TextScrubber {
	var forms []string
	for _, r := range rules {
		if r == nil || r.scrubber == nil {
			continue
		}
		for _, sec := range r.scrubber.strs {
			forms = append(forms, encodedForms(sec)...)
		}
	}
	s := newScrubber(forms)
	if s == nil {
		return nil
	}
	return &TextScrubber{s: s}
}

// encodedForms is a secret and the encodings of it a log or an error
// message may carry.
func encodedForms(sec string) []string {
	b := []byte(sec)
	lower := hex.EncodeToString(b)
	forms := []string{
		sec,
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		lower,
		strings.ToUpper(lower),
	}
	if strings.ContainsAny(sec, `"\`) {
		// As it appears inside a JSON string (the admin API's answers):
		// the only bytes of a secret encoding/json escapes, with HTML
		// escaping off and no control characters in a secret.
		forms = append(forms, strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(sec))
	}
	return forms
}

// Text returns s with every secret, and every encoded form of one, replaced
// by "[redacted]".
func (t *TextScrubber) Text(s string) string {
	if t == nil || s == "" {
		return s
	}
	out, _ := t.s.replaceString(s)
	return out
}

// String describes the scrubber without its secrets.
func (t *TextScrubber) String() string {
	if t == nil {
		return "transform.TextScrubber(none)"
	}
	return "transform.TextScrubber(" + strconv.Itoa(len(t.s.secrets)) + " forms)"
}

// Format prints String for every verb, so that no verb reaches the secrets.
func (t *TextScrubber) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }
