package allowlist

import (
	"fmt"
	"strings"
)

// Entry is one compiled allowlist pattern.
type Entry struct {
	// Index is the entry's position in the list given to New (0-based); the
	// caller maps it back to its config line and transform.
	Index int
	// Domain is the normalised pattern: "api.x.com", "*.x.com", "*", or a
	// canonical IP literal.
	Domain string
	Kind   Kind
}

// Verdict is the outcome of Policy.Decide.
type Verdict struct {
	Allowed bool
	// Entry is the entry that allowed the host; zero when !Allowed.
	Entry Entry
}

// EntryError reports an allowlist entry that New could not compile.
type EntryError struct {
	Index  int    // position in the list given to New (0-based)
	Domain string // the domain as written in the config
	Err    error
}

func (e *EntryError) Error() string { return fmt.Sprintf("domain %q: %v", e.Domain, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// DuplicateError is the Err of an EntryError whose pattern, once
// normalised, is the same as an earlier entry's. Two entries for one host
// would leave it unclear which transform applies, so this is refused rather
// than resolved by order.
type DuplicateError struct {
	Pattern       string // the normalised pattern both entries share
	Earlier       int    // Index of the earlier entry
	EarlierDomain string // the earlier entry as written
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("same pattern %q as entry %d (%q); keep only one of them", e.Pattern, e.Earlier, e.EarlierDomain)
}

// Policy is a compiled allowlist. It is immutable after New and safe for
// concurrent use; a reload builds a new Policy and swaps the pointer.
// A nil or zero Policy allows nothing.
type Policy struct {
	entries []Entry
	// exact maps a host name or canonical IP literal to its entry.
	exact map[string]int
	// wild maps the suffix of a wildcard ("x.com" for "*.x.com") to its entry.
	wild map[string]int
	// minWild and maxWild bound the lengths of the keys of wild, so Decide
	// skips lookups that cannot hit.
	minWild, maxWild int
	anyIdx           int
	hasAny           bool
}

// New compiles an allowlist. It fails on the first invalid or duplicate
// entry with an *EntryError naming it.
func New(domains []string) (*Policy, error) {
	p := &Policy{
		entries: make([]Entry, 0, len(domains)),
		exact:   make(map[string]int),
		wild:    make(map[string]int),
	}
	seen := make(map[string]int, len(domains))
	for i, d := range domains {
		pattern, kind, err := ParseDomain(d)
		if err != nil {
			return nil, &EntryError{Index: i, Domain: d, Err: err}
		}
		if j, dup := seen[pattern]; dup {
			return nil, &EntryError{Index: i, Domain: d, Err: &DuplicateError{Pattern: pattern, Earlier: j, EarlierDomain: domains[j]}}
		}
		seen[pattern] = i
		p.entries = append(p.entries, Entry{Index: i, Domain: pattern, Kind: kind})
		switch kind {
		case KindExact:
			p.exact[pattern] = i
		case KindWildcard:
			suffix := strings.TrimPrefix(pattern, "*.")
			p.wild[suffix] = i
			if p.minWild == 0 || len(suffix) < p.minWild {
				p.minWild = len(suffix)
			}
			p.maxWild = max(p.maxWild, len(suffix))
		case KindAny:
			p.anyIdx, p.hasAny = i, true
		}
	}
	return p, nil
}

// Entries returns a copy of the compiled entries, in list order.
func (p *Policy) Entries() []Entry {
	if p == nil {
		return nil
	}
	return append([]Entry(nil), p.entries...)
}

// Decide matches a host normalised by NormalizeHost. Precedence (README,
// "The allowlist"): an exact entry, then the longest (most specific)
// wildcard, then "*". "*.x.com" matches every depth below x.com but never x.com itself. An
// IP literal matches only an entry naming that literal, or "*". The empty
// host matches nothing.
//
// Decide does not allocate and its cost does not grow with the list: at most
// one map lookup per label of host.
func (p *Policy) Decide(host string) Verdict {
	if p == nil || host == "" {
		return Verdict{}
	}
	if i, ok := p.exact[host]; ok {
		return p.allow(i)
	}
	if !isIPLiteral(host) && len(p.wild) > 0 {
		// Walking the dots left to right visits suffixes longest first, so
		// the first hit is the most specific wildcard. A suffix starts after
		// a dot, so the apex (the whole host) is never looked up here.
		for i := 0; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			suffix := host[i+1:]
			if len(suffix) < p.minWild {
				break
			}
			if len(suffix) > p.maxWild {
				continue
			}
			if j, ok := p.wild[suffix]; ok {
				return p.allow(j)
			}
		}
	}
	if p.hasAny {
		return p.allow(p.anyIdx)
	}
	return Verdict{}
}

func (p *Policy) allow(i int) Verdict {
	return Verdict{Allowed: true, Entry: p.entries[i]}
}

// isIPLiteral tells an IP literal from a name in NormalizeHost's output:
// IPv6 has a colon, and a name whose last label is all digits is always
// IPv4 there (names never end in a number).
func isIPLiteral(host string) bool {
	if strings.IndexByte(host, ':') >= 0 {
		return true
	}
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}
