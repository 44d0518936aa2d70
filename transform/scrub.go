package transform

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// Scrubber replaces every occurrence of a set of secrets in response headers
// and bodies, so that an upstream that echoes a credential (a debug
// endpoint, an error page quoting the request) does not hand it to the
// sandbox. A nil *Scrubber is valid and changes nothing.
//
// In headers a secret becomes "[redacted]". In bodies it becomes a mask of
// the same length — "[redacted]" followed by '*'s, or only '*'s for a secret
// shorter than that — so that a body keeps its Content-Length and streams
// through unchanged in size, without re-chunking or per-read flushes.
//
// Matching is leftmost, and longest among secrets starting at the same byte,
// so the output does not depend on how the input was split into reads.
// Only exact byte sequences are found: an upstream that returns a secret
// encoded (base64, URL-escaped) or truncated is not caught. Header names
// are the exception: Go rewrites their case, so a name is matched without
// regard to case, and a header whose name holds a secret is dropped.
//
// A streamed body is released as soon as it is known not to start a secret:
// only its longest tail that is a proper prefix of some secret ("…Bear" for
// "Bearer …") is held back until the next bytes decide it, so an event
// stream whose events end in "\n\n" is passed on event by event. Such a
// tail is never released while the upstream stalls, as the next bytes could
// complete the secret: it waits for those bytes, or for the end of the body
// (when it can no longer become a secret and is released as it is).
// Releasing it after a pause could hand out all of a secret but its last
// byte; masking it would corrupt text that merely ends like a secret
// begins. The cost is that a chunk or frame ending in such a tail waits for
// the next one.
type Scrubber struct {
	secrets [][]byte // distinct, non-empty, longest first
	mask    []byte   // "[redacted]***…" and "****…" of maxLen: see maskFor
	stars   []byte
	strs    []string // the same, as strings
	maxLen  int
	minLen  int
	starts  [256]bool // starts[c]: some secret begins with the byte c

	// anchors[j] is the offset in secrets[j] of its rarest byte (see
	// commonBytes), which find looks for with bytes.IndexByte: a vector
	// scan that stops only where that byte occurs, not at every byte.
	anchors []int

	// A secret that holds another one is not scanned for on its own: it
	// can occur only around an occurrence of the one it holds, so find
	// scans for the bare secrets (those that hold no other) and checks
	// the rest there. "Bearer ${env:TOKEN}" makes the common case: the
	// whole value holds the token, and a body is scanned once, not twice.
	bare []int // indices of the bare secrets
	// outers[j], for a bare secrets[j], lists the secrets that hold it, and
	// where: secrets[k] at i holds secrets[j] at i+offset.
	outers [][]outer

	// Horspool over the minLen-byte prefixes of the secrets, built when
	// minLen >= horspoolMin: shift[c] is how far the window may move when
	// its last byte is c; check[c] says whether c ends some prefix. find
	// uses it for more than anchoredMax bare secrets shorter than
	// sampleMin, and for the rest of a buffer where the sampled pairs turn
	// out to be common.
	horspool bool
	shift    [256]uint16
	check    [256]bool

	// Sampling, when every secret is at least sampleMin bytes, and for
	// shorter ones (horspoolMin or more) where the anchored scan finds
	// its anchor bytes common (text, where a sample is cheaper than a
	// stop): find reads only every stride-th pair of bytes (stride = shortest secret − 1)
	// and looks it up in pairs, the set of every two adjacent bytes of
	// every secret. An occurrence spans more than stride pairs, so one
	// sample falls in it, on a pair of its own. The samples do not
	// depend on each other's bytes, as Horspool's shifts and
	// bytes.IndexByte's restarts do: the processor runs them side by side,
	// and a random pair is in the set about once in 65536/(pairs in
	// secrets) samples. See findSampled.
	stride int
	pairs  *[1 << 16 / 64]uint64 // bit x: the pair x (first byte low) occurs in a secret
	// sampleFirst: find samples from the start of every buffer, not only
	// once an anchored scan has given way.
	sampleFirst bool
}

// sampleMin is the shortest secret for which find samples pairs from the
// start: below it, a sample every few bytes costs more than a vector scan
// for a byte that is rare, as in binary bodies.
const sampleMin = 17

// sampleDenseShift sets when sampling gives way to Horspool: once more
// than 4 + scanned>>sampleDenseShift samples were in the set without an
// occurrence. Such a sample costs a check of stride positions, a few
// Horspool steps each; more than one per 256 bytes is a loss.
const sampleDenseShift = 8

// outer is a secret that holds a bare one: see Scrubber.outers.
type outer struct {
	secret []byte
	offset int // where it holds the bare secret
}

// anchoredMax is the most secrets find looks for one by one, a vector scan
// each; for more, one Horspool pass over all of them is faster.
const anchoredMax = 4

// horspoolMin is the shortest secret for which Horspool is built: with
// shorter ones it skips too little to beat a vector scan, however often
// that stops.
const horspoolMin = 4

// denseShift sets when an anchored scan gives way to sampling: once its
// anchor byte has stopped it at more than 4 + scanned>>denseShift places
// that were not the secret. A stop costs about as much as Horspool spends
// on a hundred bytes, so more than one stop per 128 bytes is a loss.
const denseShift = 7

// commonBytes lists bytes from the most to the least frequent in typical
// response bodies (text, JSON, HTML, base64): a secret is looked for by its
// byte that comes last here, or is not here at all, so that the scan stops
// as seldom as possible where the secret is not. Only speed depends on this
// order, never what is found.
const commonBytes = " etaoinsrhldcu\"m:,fpgwy.b\n0v12k/-_=3549867x<>ETASIONRLCDMPHBFUGW{}jqz\tYKVXJQZ+;()[]'&%#@!?*|~^$`\\\r"

// rarestByte is the offset of the byte of secret that comes last in
// commonBytes (the first such byte if there are several).
func rarestByte(secret string) int {
	best, bestRarity := 0, -1
	for i := 0; i < len(secret); i++ {
		rarity := strings.IndexByte(commonBytes, secret[i])
		if rarity < 0 {
			rarity = len(commonBytes) // rarer than any listed
		}
		if rarity > bestRarity {
			best, bestRarity = i, rarity
		}
	}
	return best
}

// newScrubber returns a Scrubber for the distinct non-empty secrets, or nil
// if there are none.
func newScrubber(secrets []string) *Scrubber {
	seen := make(map[string]bool, len(secrets))
	var strs []string
	for _, s := range secrets {
		if s != "" && !seen[s] {
			seen[s] = true
			strs = append(strs, s)
		}
	}
	if len(strs) == 0 {
		return nil
	}
	sort.SliceStable(strs, func(i, j int) bool { return len(strs[i]) > len(strs[j]) })
	s := &Scrubber{strs: strs, maxLen: len(strs[0]), minLen: len(strs[len(strs)-1])}
	s.stars = bytes.Repeat([]byte{'*'}, s.maxLen)
	s.mask = append([]byte(redacted), s.stars...)[:max(s.maxLen, len(redacted))]
	for _, v := range strs {
		s.secrets = append(s.secrets, []byte(v))
		s.starts[v[0]] = true
		s.anchors = append(s.anchors, rarestByte(v))
	}
	s.outers = make([][]outer, len(strs))
	for k, v := range strs {
		// The shortest secret v holds is bare: whatever it held, v would
		// hold too, and that would be shorter still. Distinct secrets of
		// v's length cannot be in v, so only shorter ones are looked at.
		held := -1
		for j := len(strs) - 1; j > k && len(strs[j]) < len(v); j-- {
			if off := strings.Index(v, strs[j]); off >= 0 {
				held = j
				s.outers[j] = append(s.outers[j], outer{secret: s.secrets[k], offset: off})
				break
			}
		}
		if held < 0 {
			s.bare = append(s.bare, k)
		}
	}
	if s.minLen >= horspoolMin {
		s.sample()
		s.sampleFirst = s.minLen >= sampleMin
	}
	if m := s.minLen; m >= horspoolMin && m <= 1<<15 {
		s.horspool = true
		for c := range s.shift {
			s.shift[c] = uint16(m)
		}
		for _, v := range strs {
			for j := 0; j < m-1; j++ {
				s.shift[v[j]] = min(s.shift[v[j]], uint16(m-1-j))
			}
			s.check[v[m-1]] = true
		}
	}
	return s
}

// sample builds the pair set findSampled looks samples up in; newScrubber
// calls it for secrets of horspoolMin bytes or more, tests on shorter ones
// too (it needs two bytes: a pair).
func (s *Scrubber) sample() {
	if s.minLen < 2 {
		return
	}
	s.stride = s.minLen - 1
	s.pairs = new([1 << 16 / 64]uint64)
	for _, v := range s.secrets {
		for j := 0; j+1 < len(v); j++ {
			x := uint16(v[j]) | uint16(v[j+1])<<8
			s.pairs[x>>6] |= 1 << (x & 63)
		}
	}
}

// maskFor is the same-length replacement of an n-byte secret in a body.
func (s *Scrubber) maskFor(n int) []byte {
	if n >= len(redacted) {
		return s.mask[:n]
	}
	return s.stars[:n]
}

// String describes the scrubber without its secrets.
func (s *Scrubber) String() string {
	if s == nil {
		return "transform.Scrubber(none)"
	}
	return fmt.Sprintf("transform.Scrubber(%d secrets)", len(s.secrets))
}

// Format prints String for every verb.
func (s *Scrubber) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// finder is find's memory within one buffer: reset it for each new one.
type finder struct {
	// next caches, per bare secret when there are several, the position
	// of its next occurrence (-2 unknown, -1 none).
	next []int
	// sampling: an anchor byte is common in this buffer; sampled pairs
	// for the rest of it.
	sampling bool
	// dense: anchor bytes or sampled pairs are common in this buffer;
	// Horspool for the rest of it.
	dense bool
}

func (s *Scrubber) newFinder() finder {
	var f finder
	if len(s.bare) > 1 {
		f.next = make([]int, len(s.secrets))
	}
	f.reset()
	return f
}

func (f *finder) reset() {
	for i := range f.next {
		f.next[i] = -2
	}
	f.sampling, f.dense = false, false
}

// find returns the leftmost occurrence at or after from of any secret in b
// (the longest one when several start there) and its length; -1 if none.
// Every strategy finds the same occurrence; they differ only in speed.
func (s *Scrubber) find(b []byte, from int, f *finder) (int, int) {
	if s.horspool && f.dense {
		return s.findHorspool(b, from)
	}
	if s.pairs != nil && (f.sampling || s.sampleFirst) {
		return s.findSampled(b, from, f)
	}
	if s.horspool && len(s.bare) > anchoredMax {
		return s.findHorspool(b, from)
	}
	best, bestLen := -1, 0
	for _, j := range s.bare {
		sec := s.secrets[j]
		n := -2
		if f.next != nil {
			n = f.next[j]
		}
		if n == -2 || (n >= 0 && n < from) {
			var dense bool
			n, dense = indexAnchored(b, from, sec, s.anchors[j], s.pairs != nil)
			if dense {
				f.sampling = true
				return s.findSampled(b, from, f)
			}
			if f.next != nil {
				f.next[j] = n
			}
		}
		if n < 0 {
			// Nothing that holds sec can occur either.
			continue
		}
		// Bare secrets are sorted longest first, and none is a prefix of
		// another, so "<" is enough here.
		if best < 0 || n < best {
			best, bestLen = n, len(sec)
		}
		// A secret that holds sec at offset o and starts at or after from
		// holds an occurrence of sec at or after from, so at n or later:
		// it starts at n-o or later. One that starts after n is not the
		// leftmost. So only starts from n-o to n are left to check.
		for _, o := range s.outers[j] {
			for i := max(from, n-o.offset); i <= n && i <= best && i+len(o.secret) <= len(b); i++ {
				if b[i] == o.secret[0] && bytes.Equal(b[i:i+len(o.secret)], o.secret) {
					if i < best || len(o.secret) > bestLen {
						best, bestLen = i, len(o.secret)
					}
					break
				}
			}
		}
	}
	return best, bestLen
}

// indexAnchored is the index of the first occurrence of sec in b at or after
// from, or -1: bytes.Index, but scanning for sec's byte at offset anchor
// (its rarest) instead of its first, and only where a whole sec fits. If
// giveUp, it stops early with dense set when that byte turns out to be
// common (see denseShift), and the caller searches another way.
func indexAnchored(b []byte, from int, sec []byte, anchor int, giveUp bool) (i int, dense bool) {
	c := sec[anchor]
	// An occurrence at i has c at i+anchor, and i+len(sec) <= len(b).
	end := len(b) - len(sec) + anchor + 1
	misses := 0
	for p := from + anchor; p < end; p++ {
		k := bytes.IndexByte(b[p:end], c)
		if k < 0 {
			return -1, false
		}
		p += k
		if i := p - anchor; b[i] == sec[0] && bytes.Equal(b[i:i+len(sec)], sec) {
			return i, false
		}
		if misses++; giveUp && misses > 4+(p-from)>>denseShift {
			return -1, true
		}
	}
	return -1, false
}

// findSampled is find by sampling pairs of bytes (see Scrubber.pairs),
// at from, from+stride, from+2·stride, …
//
// Every occurrence at i >= from is at least stride+1 bytes long, so the
// first sample at or after i, at most stride−1 bytes on, is a pair inside
// it: in the set. Its start is therefore among the stride positions up to
// that sample, which is where a sample in the set is checked; an
// occurrence further left would have been found at an earlier sample.
// The first sample with an occurrence gives the leftmost one.
//
// If samples in the set turn out common in this buffer (the secrets' pairs
// are frequent in it), each costs a check of stride positions: it gives
// way to Horspool, as the anchored scan does.
func (s *Scrubber) findSampled(b []byte, from int, f *finder) (int, int) {
	stride := s.stride
	hits := 0
	for p := from; p < len(b)-1; p += stride {
		x := uint16(b[p]) | uint16(b[p+1])<<8
		if s.pairs[x>>6]&(1<<(x&63)) == 0 {
			continue
		}
		for i := max(from, p-stride+1); i <= p; i++ {
			if !s.starts[b[i]] {
				continue
			}
			for _, sec := range s.secrets { // longest first
				if len(sec) <= len(b)-i && b[i] == sec[0] && bytes.Equal(b[i:i+len(sec)], sec) {
					return i, len(sec)
				}
			}
		}
		if hits++; s.horspool && hits > 4+(p-from)>>sampleDenseShift {
			// No occurrence starts at or before p: each would have had a
			// sample there.
			f.dense = true
			return s.findHorspool(b, p+1)
		}
	}
	return -1, 0
}

// findHorspool is find by a Horspool scan over the secrets' minLen-byte
// prefixes: one pass for all secrets, skipping up to minLen bytes at a time.
// A secret occurring at i has its prefix at i, and Horspool visits every
// window where a prefix can occur, so the first hit is the leftmost.
func (s *Scrubber) findHorspool(b []byte, from int) (int, int) {
	last := s.minLen - 1
	for i := from; i+last < len(b); {
		c := b[i+last]
		if s.check[c] {
			for _, sec := range s.secrets { // longest first
				if len(sec) <= len(b)-i && sec[last] == c && bytes.Equal(b[i:i+len(sec)], sec) {
					return i, len(sec)
				}
			}
		}
		i += int(s.shift[c])
	}
	return -1, 0
}

// replaceAll returns b with every secret replaced, and whether anything was.
func (s *Scrubber) replaceAll(b []byte) ([]byte, bool) {
	f := s.newFinder()
	var out []byte
	pos := 0
	for {
		i, l := s.find(b, pos, &f)
		if i < 0 {
			break
		}
		out = append(out, b[pos:i]...)
		out = append(out, redacted...)
		pos = i + l
	}
	if out == nil {
		return b, false
	}
	return append(out, b[pos:]...), true
}

// replaceString is replaceAll for a string; it allocates only on a match.
func (s *Scrubber) replaceString(v string) (string, bool) {
	for _, sec := range s.strs {
		if strings.Contains(v, sec) {
			b, _ := s.replaceAll([]byte(v))
			return string(b), true
		}
	}
	return v, false
}

// Header replaces every occurrence of a secret in h's values, drops every
// header whose name holds a secret in any letter case, and reports whether
// it changed anything. Use it on trailers and informational (1xx) headers
// too.
func (s *Scrubber) Header(h http.Header) bool {
	if s == nil {
		return false
	}
	changed := false
	for k, vs := range h {
		if s.inName(k) {
			// Go canonicalises names ("x-tok" arrives as "X-Tok"), so an
			// exact match would miss it; and a name cannot be masked into
			// a valid one. A header named after a secret means nothing.
			delete(h, k)
			changed = true
			continue
		}
		for i, v := range vs {
			if nv, ok := s.replaceString(v); ok {
				vs[i] = nv
				changed = true
			}
		}
	}
	return changed
}

// inName reports whether the header name k holds a secret, ignoring ASCII
// case.
func (s *Scrubber) inName(k string) bool {
	for _, sec := range s.strs {
		if len(sec) > len(k) {
			continue
		}
		for i := 0; i+len(sec) <= len(k); i++ {
			if asciiLower(k[i]) == asciiLower(sec[0]) && strings.EqualFold(k[i:i+len(sec)], sec) {
				return true
			}
		}
	}
	return false
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Replace returns v with every secret replaced by "[redacted]", for text
// that came from an upstream and is passed on in another form (an error
// message quoting a malformed response).
func (s *Scrubber) Replace(v string) string {
	if s == nil {
		return v
	}
	nv, _ := s.replaceString(v)
	return nv
}

// Reader returns a ReadCloser that yields rc's bytes with every secret
// replaced. Memory is bounded: besides one work buffer it keeps only the
// held-back tail of what it read (shorter than the longest secret). Closing
// it closes rc.
//
// A Read returns as soon as a read of rc brought bytes that cannot be the
// start of a secret: it never waits for more input while it has some to
// give.
// The held-back tail (a proper prefix of some secret) is released once the
// following bytes show it does not start a secret, or at io.EOF. On any
// other error from rc it stays held (the error is passed through; a later
// Read tries rc again).
func (s *Scrubber) Reader(rc io.ReadCloser) io.ReadCloser {
	if s == nil {
		return rc
	}
	return &scrubReader{s: s, rc: rc, find: s.newFinder()}
}

// scrubBufSize is the size of the internal work buffer, used when the
// caller's buffer is too small to work in place.
const scrubBufSize = 32 << 10

type scrubReader struct {
	s    *Scrubber
	rc   io.ReadCloser
	pend []byte // held back: read from rc, not yet known not to start a secret; allocated when first needed
	out  []byte // processed bytes not yet returned (a view of buf)
	buf  []byte // work buffer for small caller buffers; allocated lazily
	find finder
	err  error // non-EOF error from rc to return once out is drained
	eof  bool  // rc returned io.EOF: pend has been flushed
}

func (r *scrubReader) Close() error { return r.rc.Close() }

func (r *scrubReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for empty := 0; ; {
		if len(r.out) > 0 {
			n := copy(p, r.out)
			r.out = r.out[n:]
			return n, nil
		}
		if r.eof {
			return 0, io.EOF
		}
		if r.err != nil {
			err := r.err
			r.err = nil
			return 0, err
		}
		// Work in p itself when it has room for the held-back bytes and a
		// useful read: then, without a match, nothing is copied but the
		// short tail. Otherwise work in our own buffer.
		direct := len(p) >= 2*r.s.maxLen && len(p) >= 512
		area := p
		if !direct {
			if r.buf == nil {
				r.buf = make([]byte, max(scrubBufSize, 4*r.s.maxLen))
			}
			area = r.buf
		}
		k := copy(area, r.pend)
		m, err := r.rc.Read(area[k:])
		switch {
		case err == io.EOF:
			r.eof = true
		case err != nil:
			r.err = err
		case m == 0:
			if empty++; empty >= 100 {
				return 0, io.ErrNoProgress
			}
		}
		if n := r.process(area[:k+m], direct); n > 0 {
			return n, nil
		}
	}
}

// process scrubs work (held-back bytes followed by fresh ones). It keeps the
// tail that may start a secret in pend and either leaves the output in r.out
// or, when working in place without a match, returns the number of bytes of
// work (that is, of the caller's buffer) ready to return.
func (r *scrubReader) process(work []byte, direct bool) int {
	s := r.s
	// Bytes from hold on may start a secret that the next read completes.
	// A match starting before hold is final: no longer secret starting at
	// the same byte can run past the end of work, or hold would be there.
	hold := len(work)
	if !r.eof {
		hold = s.holdFrom(work, 0)
	}
	r.find.reset()
	// Masks have the secrets' lengths, so they are written in place.
	pos := 0
	for {
		i, l := s.find(work, pos, &r.find)
		if i < 0 || i >= hold {
			break
		}
		copy(work[i:i+l], s.maskFor(l))
		pos = i + l
		if pos > hold {
			// The match covers the tail that was held; what may start a
			// secret now starts after it.
			hold = s.holdFrom(work, pos)
		}
	}
	if r.pend == nil && hold < len(work) {
		r.pend = make([]byte, 0, s.maxLen) // most bodies never need it
	}
	r.pend = append(r.pend[:0], work[hold:]...)
	if direct {
		return hold
	}
	r.out = work[:hold]
	return 0
}

// holdFrom returns where the longest tail of work at or after from begins
// that is a proper prefix of some secret; len(work) if there is none.
func (s *Scrubber) holdFrom(work []byte, from int) int {
	for j := max(from, len(work)-(s.maxLen-1)); j < len(work); j++ {
		if !s.starts[work[j]] {
			continue
		}
		tail := work[j:]
		for _, sec := range s.secrets { // longest first
			if len(sec) <= len(tail) {
				break
			}
			if bytes.HasPrefix(sec, tail) {
				return j
			}
		}
	}
	return len(work)
}
