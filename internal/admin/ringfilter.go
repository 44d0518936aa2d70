package admin

// Matching returns up to n of the most recent values that keep accepts,
// newest first, as a new slice the caller owns (never nil). keep is called
// with the ring locked, so it must be quick and must not use the ring.
func (r *Ring[T]) Matching(n int, keep func(T) bool) []T {
	out := []T{}
	if r == nil || n < 1 {
		return out
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	count := r.next
	if r.full {
		count = len(r.buf)
	}
	for i := 0; i < count && len(out) < n; i++ {
		j := r.next - 1 - i
		if j < 0 {
			j += len(r.buf)
		}
		if keep(r.buf[j]) {
			out = append(out, r.buf[j])
		}
	}
	return out
}
