package state

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReadersDoNotLinkConsensus: the replicated data model and the job
// manager, which only reads it and builds commands, do not depend on the
// consensus engine (hashicorp/raft), directly or through another package.
func TestReadersDoNotLinkConsensus(t *testing.T) {
	for _, pkg := range []string{"github.com/reclaimnet/reclaimnet/state", "github.com/reclaimnet/reclaimnet/agent/jobs"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed only %d packages; the listing is broken", pkg, len(deps))
		}
		for _, d := range deps {
			if d == "github.com/hashicorp/raft" || strings.HasPrefix(d, "github.com/hashicorp/raft/") || d == "github.com/reclaimnet/reclaimnet/raft" {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
}
