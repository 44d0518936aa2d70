package hooks

import "testing"

func TestLooksLikeCredential(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        bool
	}{
		{"X-Event-Source", "agent-sandbox", false},
		{"Idempotency-Key", "x", false},
		{"Authorization", "Bearer x", true},
		{"X-Api-Key", "abc", true},
		{"X-Auth-Token", "abc", true},
		{"X-Custom", "Bearer abc", true},
		{"X-Custom", "sk-abc", true},
		{"Cookie", "a=b", true},
		{"X-Signing-Key", "k", true},
	} {
		if got, _ := looksLikeCredential(tc.name, tc.value); got != tc.want {
			t.Errorf("looksLikeCredential(%q, %q) = %v", tc.name, tc.value, got)
		}
	}
}

func TestReservedHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"host", true},
		{"Content-Type", true},
		{"idempotency-key", true},
		{"User-Agent", true},
		{"proxy-authorization", true},
		{"X-Event-Source", false},
		{"Accept-Language", false},
	} {
		if got := reservedHeader(tc.name); got != tc.want {
			t.Errorf("reservedHeader(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestValidHeaderName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"X-Event-Source", true},
		{"x_custom.1", true},
		{"", false},
		{"X Event", false},
		{"X:Event", false},
		{"Ünï", false},
	} {
		if got := validHeaderName(tc.name); got != tc.want {
			t.Errorf("validHeaderName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
