package allowlist

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestDecide(t *testing.T) {
	list := []string{
		"api.example.com",    // 0
		"*.example.com",      // 1
		"*.deep.example.com", // 2
		"bücher.example",     // 3
		"*.xn--bcher-kva.example",
		"10.1.2.3",     // 5
		"2001:db8::1",  // 6
		"*.10.in-addr", // 7: a name that merely has digits inside
		"*.com",        // 8
	}
	p, err := New(list)
	if err != nil {
		t.Fatal(err)
	}
	withAny, err := New(append(append([]string(nil), list...), "*"))
	if err != nil {
		t.Fatal(err)
	}
	empty, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		policy *Policy
		host   string // raw: normalised first, as the proxy does
		want   int    // entry index, -1 for denied
	}{
		{"exact", p, "api.example.com", 0},
		{"exact beats wildcard", p, "API.example.com.", 0},
		{"wildcard one level", p, "www.example.com", 1},
		{"wildcard any depth", p, "a.b.c.example.com", 1},
		{"apex not matched by wildcard", p, "example.com", 8},
		{"apex of deep wildcard", p, "deep.example.com", 1},
		{"longest wildcard wins", p, "x.deep.example.com", 2},
		{"longest wildcard wins deeper", p, "x.y.deep.example.com", 2},
		{"suffix is not a label boundary", p, "notexample.com", 8},
		{"suffix lookalike", p, "api.example.com.evil.net", -1},
		{"idna exact", p, "BÜCHER.example.", 3},
		{"idna exact punycode", p, "xn--bcher-kva.example", 3},
		{"idna wildcard", p, "www.bücher.example", 4},
		{"tld wildcard", p, "anything.com", 8},
		{"tld wildcard not the tld", p, "com", -1},
		{"ipv4 literal", p, "10.1.2.3", 5},
		{"ipv4 literal odd spelling", p, "0x0a.0x01.0x0203", 5},
		{"ipv4 other", p, "10.1.2.4", -1},
		{"ipv6 literal", p, "[2001:DB8::1]", 6},
		{"ipv6 other", p, "2001:db8::2", -1},
		{"mapped is not the ipv4 entry", p, "::ffff:10.1.2.3", -1},
		{"digits inside a name still match wildcards", p, "1.10.in-addr", 7},
		{"miss", p, "example.org", -1},
		{"any catches miss", withAny, "example.org", 9},
		{"any catches ip", withAny, "192.0.2.1", 9},
		{"any catches ipv6", withAny, "::1", 9},
		{"exact beats any", withAny, "api.example.com", 0},
		{"wildcard beats any", withAny, "www.example.com", 1},
		{"empty policy", empty, "example.com", -1},
		{"nil policy", nil, "example.com", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, _, err := NormalizeHost(tc.host)
			if err != nil {
				t.Fatalf("NormalizeHost(%q): %v", tc.host, err)
			}
			v := tc.policy.Decide(host)
			if tc.want < 0 {
				if v.Allowed || v.Entry != (Entry{}) {
					t.Errorf("Decide(%q) = %+v, want denied", host, v)
				}
				return
			}
			if !v.Allowed || v.Entry.Index != tc.want {
				t.Errorf("Decide(%q) = %+v, want entry %d", host, v, tc.want)
			}
			if got, _, _ := ParseDomain(v.Entry.Domain); got != v.Entry.Domain {
				t.Errorf("Decide(%q) entry domain %q is not normalised", host, v.Entry.Domain)
			}
		})
	}
}

// New refuses wildcards over IP addresses, so this guard in Decide cannot be
// reached through the API; it is checked white-box because it is what the
// allowlist promises ("an IP literal never matches a wildcard").
func TestDecideIPLiteralNeverMatchesWildcard(t *testing.T) {
	p, err := New([]string{"*.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"0.2.1", "2.1", "db8::1"} {
		p.wild[suffix] = 0
		p.minWild, p.maxWild = 1, 100
	}
	for _, host := range []string{"192.0.2.1", "2001:db8::1"} {
		if v := p.Decide(host); v.Allowed {
			t.Errorf("Decide(%q) = %+v, want denied", host, v)
		}
	}
}

func TestDecideEmptyHost(t *testing.T) {
	p, err := New([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Decide(""); v.Allowed {
		t.Errorf(`Decide("") = %+v, want denied`, v)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	p, err := New([]string{"api.example.com", "*.example.com", "*.deep.example.com", "*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"api.example.com", "a.b.deep.example.com", "example.org", "10.0.0.1"} {
		if n := testing.AllocsPerRun(100, func() { p.Decide(host) }); n != 0 {
			t.Errorf("Decide(%q) allocated %v times per run, want 0", host, n)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		domains   []string
		wantIndex int
		wantText  string
		wantDup   int // earlier index for duplicates, -1 otherwise
	}{
		{"bad entry", []string{"a.com", "https://b.com/"}, 1, `domain "https://b.com/": a domain, not a URL; use "b.com"`, -1},
		{"duplicate exact", []string{"a.com", "b.com", "A.com."}, 2, `domain "A.com.": same pattern "a.com" as entry 0 ("a.com"); keep only one of them`, 0},
		{"duplicate wildcard idna", []string{"*.bücher.example", "*.xn--bcher-kva.example"}, 1, `domain "*.xn--bcher-kva.example": same pattern "*.xn--bcher-kva.example" as entry 0 ("*.bücher.example"); keep only one of them`, 0},
		{"duplicate ip spelling", []string{"127.1", "127.0.0.1"}, 1, `domain "127.0.0.1": same pattern "127.0.0.1" as entry 0 ("127.1"); keep only one of them`, 0},
		{"duplicate any", []string{"*", "x.com", "*"}, 2, `domain "*": same pattern "*" as entry 0 ("*"); keep only one of them`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.domains)
			if p != nil {
				t.Errorf("New returned a policy with its error")
			}
			var ee *EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("New error = %v (%T), want *EntryError", err, err)
			}
			if ee.Index != tc.wantIndex || ee.Domain != tc.domains[tc.wantIndex] {
				t.Errorf("EntryError = {%d %q}, want {%d %q}", ee.Index, ee.Domain, tc.wantIndex, tc.domains[tc.wantIndex])
			}
			if err.Error() != tc.wantText {
				t.Errorf("error text = %q, want %q", err.Error(), tc.wantText)
			}
			var de *DuplicateError
			if got := errors.As(err, &de); got != (tc.wantDup >= 0) {
				t.Fatalf("errors.As(*DuplicateError) = %v, want %v", got, tc.wantDup >= 0)
			}
			if de != nil && de.Earlier != tc.wantDup {
				t.Errorf("DuplicateError.Earlier = %d, want %d", de.Earlier, tc.wantDup)
			}
		})
	}
}

func TestEntries(t *testing.T) {
	p, err := New([]string{"API.x.com", "*.Y.com.", "*", "[::1]"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{0, "api.x.com", KindExact},
		{1, "*.y.com", KindWildcard},
		{2, "*", KindAny},
		{3, "::1", KindExact},
	}
	got := p.Entries()
	if len(got) != len(want) {
		t.Fatalf("Entries() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Entries()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	got[0].Domain = "mutated"
	if p.Entries()[0].Domain != "api.x.com" {
		t.Error("Entries() exposes the policy's own slice")
	}
}

// A policy must hold its decisions for any host length, including hosts
// longer and shorter than every wildcard suffix.
func TestDecideSuffixLengthBounds(t *testing.T) {
	p, err := New([]string{"*.bb.cc", "*." + strings.Repeat("d", 60) + ".e"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"a.bb.cc", true},
		{strings.Repeat("a.", 100) + "bb.cc", true},
		{"a.b.cc", false},
		{"x." + strings.Repeat("d", 60) + ".e", true},
		{"x.e", false},
		{"cc", false},
	} {
		if got := p.Decide(tc.host).Allowed; got != tc.want {
			t.Errorf("Decide(%q).Allowed = %v, want %v", tc.host, got, tc.want)
		}
	}
}

// Run with -race: a Policy is shared by every connection of the proxy.
func TestPolicyConcurrentUse(t *testing.T) {
	p, err := New([]string{"a.example.com", "*.example.com", "*"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if v := p.Decide("x.example.com"); v.Entry.Index != 1 {
					t.Errorf("Decide = %+v, want entry 1", v)
					return
				}
				_ = p.Entries()
			}
		})
	}
	wg.Wait()
}
