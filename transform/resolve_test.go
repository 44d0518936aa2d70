package transform

import (
	"errors"
	"strings"
	"testing"
)

func TestResolveSecret(t *testing.T) {
	const secret = "hg-canary-resolve-4c2e"
	opts := Options{LookupEnv: func(n string) (string, bool) { return secret, n == "S" }}
	s, err := ResolveSecret("${env:S}", opts)
	if err != nil || s.Reveal() != secret {
		t.Fatalf("resolve: %v", err)
	}
	if _, err := ResolveSecret("hunter2", opts); !errors.Is(err, ErrLiteralSecret) {
		t.Fatalf("a literal: %v, want ErrLiteralSecret", err)
	}
	_, err = ResolveSecret("${env:MISSING}", opts)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("an unset variable: %v", err)
	}
}
