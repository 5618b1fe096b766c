package policy

import (
	"math/rand/v2"
	"testing"
)

// TestSlotCursorMatchesArithmetic walks the slot cursor forwards and
// backwards across ring wraps, bucket edges and negative slot indexes and
// compares every step with the direct arithmetic it replaces.
func TestSlotCursorMatchesArithmetic(t *testing.T) {
	e, err := NewHazardEstimator(DefaultHazardConfig())
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(e.slots))
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		start := rng.Int64N(10*n) - 5*n
		fwd, back := e.slotIter(start), e.slotIter(start)
		for step := range 3 * n {
			for _, c := range []struct {
				cur slotCursor
				idx int64
			}{{fwd, start + step}, {back, start - step}} {
				wantPos := ((c.idx % n) + n) % n
				if c.cur.pos != wantPos || c.cur.bucket != e.bucketOfSlot(c.idx) {
					t.Fatalf("slot %d: cursor at ring %d bucket %d, want ring %d bucket %d", c.idx, c.cur.pos, c.cur.bucket, wantPos, e.bucketOfSlot(c.idx))
				}
			}
			fwd.next(e)
			back.prev(e)
		}
	}
}
