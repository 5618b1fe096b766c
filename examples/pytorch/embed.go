// Package pytorch holds the PyTorch training example that follows the
// checkpoint contract (docs/jobs.md), embedded so that `reclaimnet demo` can
// run it from the binary alone, without a checkout of this repository.
package pytorch

import "embed"

// Files holds train.py and reclaimnet_ckpt.py at the root.
//
//go:embed train.py reclaimnet_ckpt.py
var Files embed.FS
