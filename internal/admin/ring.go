package admin

import "sync"

// Ring is a bounded, concurrency-safe ring of the most recent values: the
// proxy and the DNS server Add a decision each, GET /v1/decisions reads the
// newest with Last. When full, Add overwrites the oldest value.
//
// A Ring holds values, so T should be a small struct of plain fields (a
// decision record), never something holding secrets: what is added here is
// served by /v1/decisions as it is.
//
// The zero Ring, a nil *Ring and a Ring made with size < 1 hold nothing:
// Add does nothing and Last returns an empty slice.
type Ring[T any] struct {
	mu   sync.Mutex
	buf  []T
	next int  // index the next Add writes
	full bool // buf has wrapped at least once
}

// NewRing returns a ring that keeps the last size values.
func NewRing[T any](size int) *Ring[T] {
	if size < 1 {
		return &Ring[T]{}
	}
	return &Ring[T]{buf: make([]T, size)}
}

// Add appends v, dropping the oldest value if the ring is full. It never
// blocks for longer than another Add or a Last copying out at most
// the ring's size in values.
func (r *Ring[T]) Add(v T) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if len(r.buf) > 0 {
		r.buf[r.next] = v
		r.next++
		if r.next == len(r.buf) {
			r.next = 0
			r.full = true
		}
	}
	r.mu.Unlock()
}

// Last returns up to n of the most recent values, newest first, as a new
// slice the caller owns. It is never nil (so it encodes as [] in JSON);
// n < 1 gives an empty slice.
func (r *Ring[T]) Last(n int) []T {
	if r == nil || n < 1 {
		return []T{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	count := r.next
	if r.full {
		count = len(r.buf)
	}
	n = min(n, count)
	out := make([]T, n)
	for i := range out {
		j := r.next - 1 - i
		if j < 0 {
			j += len(r.buf)
		}
		out[i] = r.buf[j]
	}
	return out
}

// count returns the number of values held, at most the size given to NewRing.
func (r *Ring[T]) count() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return len(r.buf)
	}
	return r.next
}
