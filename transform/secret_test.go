package transform

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

const testSecretValue = "sk-live-0123456789abcdef"

func TestSecretReveal(t *testing.T) {
	s := newSecret(testSecretValue)
	if got := s.Reveal(); got != testSecretValue {
		t.Fatalf("Reveal() = %q", got)
	}
	if (Secret{}).Reveal() != "" || (Secret{}).String() != redacted {
		t.Fatal("zero Secret must be empty and redacted")
	}
}

func TestSecretFmt(t *testing.T) {
	s := newSecret(testSecretValue)
	for _, verb := range []string{"%s", "%v", "%+v", "%#v", "%x", "%X", "%q", "%d", "%10s", "%-20v", "% x"} {
		if got := fmt.Sprintf(verb, s); got != redacted {
			t.Errorf("Sprintf(%q) = %q, want %q", verb, got, redacted)
		}
		if got := fmt.Sprintf(verb, &s); got != redacted {
			t.Errorf("Sprintf(%q, &s) = %q, want %q", verb, got, redacted)
		}
	}
	if got := fmt.Sprint(s); got != redacted {
		t.Errorf("Sprint = %q", got)
	}
	if got := s.GoString(); got != redacted {
		t.Errorf("GoString = %q", got)
	}
	if got := fmt.Errorf("wrapped: %w", errors.New(s.String())).Error(); strings.Contains(got, testSecretValue) {
		t.Errorf("error leaks: %q", got)
	}
}

// TestSecretNested prints containers of Secrets, including unexported
// fields where fmt cannot call methods: the value must never show.
func TestSecretNested(t *testing.T) {
	s := newSecret(testSecretValue)
	type exported struct{ S Secret }
	type unexported struct{ s Secret }
	type deep struct{ in unexported }
	values := map[string]any{
		"exported":   exported{s},
		"unexported": unexported{s},
		"deep":       deep{unexported{s}},
		"ptr":        &unexported{s},
		"slice":      []Secret{s, s},
		"map":        map[string]Secret{"k": s},
		"anyslice":   []any{s},
		"rules":      mustCompile(t, []HeaderSpec{{Name: "Authorization", Value: "Bearer ${env:TOKEN}"}}),
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
			if got := fmt.Sprintf(verb, v); strings.Contains(got, testSecretValue) ||
				strings.Contains(got, fmt.Sprintf("%x", testSecretValue)) {
				t.Errorf("%s: Sprintf(%q) leaks: %s", name, verb, got)
			}
		}
	}
}

func TestSecretEncoders(t *testing.T) {
	s := newSecret(testSecretValue)
	type wrap struct {
		S   Secret            `json:"s" xml:"s"`
		P   *Secret           `json:"p" xml:"p"`
		Any any               `json:"any" xml:"-"`
		M   map[Secret]string `json:"m" xml:"-"`
	}
	w := wrap{S: s, P: &s, Any: s, M: map[Secret]string{s: "v"}}

	j, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"s":"[redacted]","p":"[redacted]","any":"[redacted]","m":{"[redacted]":"v"}}`; string(j) != want {
		t.Errorf("json = %s, want %s", j, want)
	}
	x, err := xml.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(x), testSecretValue) || !strings.Contains(string(x), "<s>[redacted]</s>") {
		t.Errorf("xml = %s", x)
	}
	text, _ := s.MarshalText()
	if string(text) != redacted {
		t.Errorf("MarshalText = %q", text)
	}
}

// TestSecretZerolog logs a Secret every way zerolog offers, to a real
// logger writing to a buffer.
func TestSecretZerolog(t *testing.T) {
	s := newSecret(testSecretValue)
	var buf bytes.Buffer
	log := zerolog.New(&buf).With().Interface("ctx", s).Logger()
	log.Info().
		Interface("interface", s).
		Interface("ptr", &s).
		Any("any", s).
		Stringer("stringer", s).
		Str("str", s.String()).
		Fields(map[string]any{"field": s}).
		Interface("struct", struct{ Token Secret }{s}).
		Interface("slice", []Secret{s}).
		Msgf("msgf %v %s", s, s)
	log.Error().Err(fmt.Errorf("boom: %v", s)).Send()

	out := buf.String()
	if strings.Contains(out, testSecretValue) {
		t.Fatalf("zerolog output leaks the secret: %s", out)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &line); err != nil {
		t.Fatalf("not JSON: %v: %s", err, out)
	}
	for _, k := range []string{"ctx", "interface", "ptr", "any", "stringer", "str", "field"} {
		if line[k] != redacted {
			t.Errorf("%s = %#v, want %q", k, line[k], redacted)
		}
	}
	if line["message"] != "msgf [redacted] [redacted]" {
		t.Errorf("message = %q", line["message"])
	}
}

func TestSecretSlog(t *testing.T) {
	s := newSecret(testSecretValue)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "s", s, "p", &s)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "s", s, slog.Any("a", s))
	if strings.Contains(buf.String(), testSecretValue) || strings.Count(buf.String(), redacted) != 4 {
		t.Fatalf("slog output: %s", buf.String())
	}
}
