package sim

import (
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// tick is the policy's control step, the same function the coordinator runs.
func tick(s policy.Snapshot, now time.Time) policy.Decisions { return policy.Tick(s, now) }
