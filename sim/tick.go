package sim

import (
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// tickAvailable reports whether policy.Tick is wired in (it is; the
// constant stays so tests can say what they check).
const tickAvailable = true

// tick is the policy's control step, the same function the coordinator runs.
func tick(s policy.Snapshot, now time.Time) policy.Decisions { return policy.Tick(s, now) }
