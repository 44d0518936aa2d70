package admin

import (
	"slices"
	"testing"
)

func TestRingMatching(t *testing.T) {
	r := NewRing[int](5)
	for i := 1; i <= 8; i++ { // holds 4..8
		r.Add(i)
	}
	even := func(v int) bool { return v%2 == 0 }
	if got := r.Matching(10, even); !slices.Equal(got, []int{8, 6, 4}) {
		t.Errorf("Matching(10, even) = %v, want [8 6 4]", got)
	}
	if got := r.Matching(2, even); !slices.Equal(got, []int{8, 6}) {
		t.Errorf("Matching(2, even) = %v, want [8 6]", got)
	}
	if got := r.Matching(3, func(int) bool { return false }); got == nil || len(got) != 0 {
		t.Errorf("no match: %v, want an empty, non-nil slice", got)
	}
	var nilRing *Ring[int]
	if got := nilRing.Matching(3, even); got == nil || len(got) != 0 {
		t.Errorf("nil ring: %v", got)
	}
}
