package jobs

import (
	"slices"
	"testing"
)

// The picker gives each job unused devices first, never more than the
// node has, and shares the least used one only when none is free; given
// back, a device is free again.
func TestGPUSet(t *testing.T) {
	t.Parallel()
	g := gpuSet{devices: []int{0, 1, 3}}
	a, shared := g.take(2)
	if !slices.Equal(a, []int{0, 1}) || shared {
		t.Fatalf("first job: %v shared %v, want [0 1] alone", a, shared)
	}
	b, shared := g.take(1)
	if !slices.Equal(b, []int{3}) || shared {
		t.Fatalf("second job: %v shared %v, want [3] alone", b, shared)
	}
	c, shared := g.take(1)
	if len(c) != 1 || !shared {
		t.Fatalf("third job on a full node: %v shared %v, want one shared device", c, shared)
	}
	g.give(a)
	d, shared := g.take(4)
	if !slices.Equal(d, []int{0, 1, 3}) || !shared {
		t.Fatalf("job asking for 4 of 3: %v shared %v, want all three, sharing", d, shared)
	}
	if e, _ := (&gpuSet{}).take(1); len(e) != 0 {
		t.Fatalf("a node without device nodes gave %v", e)
	}
	g.give(b)
	g.give(c)
	g.give(d)
	if len(g.users) != 0 {
		t.Fatalf("after every job gave its devices back: %v in use", g.users)
	}
}
