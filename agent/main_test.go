package agent

import (
	"testing"

	"github.com/reclaimnet/reclaimnet/internal/testbin"
	"github.com/reclaimnet/reclaimnet/internal/testpar"
)

// TestMain runs up to four of the package's parallel tests at once: they
// mostly wait (elections, notices, checkpoint intervals), and go test's
// default of one per core would leave two cores idle while they do. The
// binary some tests run as a real process is removed afterwards.
func TestMain(m *testing.M) { testpar.Main(m, 4, testbin.Remove) }
