package campus

import (
	"context"
	"os"
	"testing"
)

// BenchmarkBuildClose measures building and tearing down DefaultTopology
// (3 buildings, 8 nodes: 12 namespaces, 11 veth pairs, 22 shaped ends).
func BenchmarkBuildClose(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("skipping: needs root (network namespaces, veth, tc)")
	}
	ctx := context.Background()
	for b.Loop() {
		c, err := Build(ctx, DefaultTopology())
		if err != nil {
			b.Fatalf("Build: %v", err)
		}
		if err := c.Close(); err != nil {
			b.Fatalf("Close: %v", err)
		}
	}
}
