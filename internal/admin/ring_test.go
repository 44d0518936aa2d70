package admin

import (
	"slices"
	"sync"
	"testing"
)

func TestRing(t *testing.T) {
	r := NewRing[int](3)
	if got := r.Last(10); got == nil || len(got) != 0 {
		t.Fatalf("empty ring: Last = %#v, want a non-nil empty slice", got)
	}
	tests := []struct {
		add  []int
		n    int
		want []int
		len  int
	}{
		{[]int{1}, 10, []int{1}, 1},
		{[]int{2}, 10, []int{2, 1}, 2},
		{[]int{3}, 10, []int{3, 2, 1}, 3},
		{[]int{4}, 10, []int{4, 3, 2}, 3}, // wrapped: 1 dropped
		{nil, 2, []int{4, 3}, 3},
		{nil, 1, []int{4}, 3},
		{nil, 0, []int{}, 3},
		{nil, -5, []int{}, 3},
		{[]int{5, 6, 7, 8}, 3, []int{8, 7, 6}, 3},
	}
	for _, tt := range tests {
		for _, v := range tt.add {
			r.Add(v)
		}
		if got := r.Last(tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("after adding %v: Last(%d) = %v, want %v", tt.add, tt.n, got, tt.want)
		}
		if r.count() != tt.len {
			t.Errorf("after adding %v: Len = %d, want %d", tt.add, r.count(), tt.len)
		}
	}

	// Last returns a copy.
	got := r.Last(3)
	got[0] = 999
	if r.Last(1)[0] != 8 {
		t.Error("modifying Last's result changed the ring")
	}
}

func TestRingEmptyForms(t *testing.T) {
	var nilRing *Ring[string]
	var zero Ring[string]
	for name, r := range map[string]*Ring[string]{
		"nil":    nilRing,
		"zero":   &zero,
		"size 0": NewRing[string](0),
		"size<0": NewRing[string](-1),
	} {
		t.Run(name, func(t *testing.T) {
			r.Add("x")
			if got := r.Last(5); got == nil || len(got) != 0 {
				t.Errorf("Last = %#v, want a non-nil empty slice", got)
			}
			if r.count() != 0 {
				t.Errorf("Len %d, want 0", r.count())
			}
		})
	}
}

// Concurrent writers and readers: run with -race. Every value read must be
// one that was written, newest first per writer.
func TestRingConcurrent(t *testing.T) {
	type rec struct{ writer, seq int }
	r := NewRing[rec](64)
	const writers, per = 8, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				r.Add(rec{w, i})
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 500 {
				last := map[int]int{}
				for _, v := range r.Last(64) {
					if v.writer < 0 || v.writer >= writers || v.seq < 0 || v.seq >= per {
						t.Errorf("value never written: %+v", v)
						return
					}
					if prev, ok := last[v.writer]; ok && v.seq >= prev {
						t.Errorf("writer %d: seq %d after %d, want newest first", v.writer, v.seq, prev)
						return
					}
					last[v.writer] = v.seq
				}
			}
		})
	}
	wg.Wait()
	if r.count() != 64 {
		t.Errorf("Len = %d, want 64", r.count())
	}
}

// decision is about the size of a real decision record.
type decision struct {
	Client, Mode, Host, Verdict, Entry, Code, Reason string
	Port, Status                                     int
	BytesIn, BytesOut                                int64
	DurationMS                                       float64
}

func BenchmarkRingAdd(b *testing.B) {
	d := decision{Client: "10.0.0.2:41234", Mode: "tunnel", Host: "api.example.com", Verdict: "allow", Entry: "*.example.com", Port: 443, Status: 200}
	b.Run("serial", func(b *testing.B) {
		r := NewRing[decision](1000)
		b.ReportAllocs()
		for b.Loop() {
			r.Add(d)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		r := NewRing[decision](1000)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Add(d)
			}
		})
	})
	b.Run("parallel-with-reader", func(b *testing.B) {
		// Writers contend with a reader pulling the full ring, as a
		// dashboard polling /v1/decisions?limit=1000 would.
		r := NewRing[decision](1000)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
					_ = r.Last(1000)
				}
			}
		}()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Add(d)
			}
		})
		b.StopTimer()
		close(stop)
		<-done
	})
}
