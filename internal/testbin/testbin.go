// Package testbin builds the reclaimnet binary once per test binary, for
// the tests that run it as real processes (campus agents, the demo).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	once sync.Once
	path string
	err  error
	dir  string
)

// Binary returns the path of a reclaimnet binary built from this tree, once
// per test binary run; when the environment variable env names a file,
// that prebuilt binary is used instead (e.g. while the tree is edited).
// The test fails if the build does.
func Binary(t *testing.T, env string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "reclaimnet-bin-"); err != nil {
			return
		}
		path = filepath.Join(dir, "reclaimnet")
		start := time.Now()
		out, buildErr := exec.Command("go", "build", "-o", path, "github.com/reclaimnet/reclaimnet").CombinedOutput()
		if buildErr != nil {
			err = fmt.Errorf("go build: %w\n%s", buildErr, out)
			return
		}
		t.Logf("built reclaimnet in %v", time.Since(start).Round(time.Millisecond))
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Main runs the package's tests and then removes the built binary; call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Remove()
	os.Exit(code)
}

// Remove deletes the binary Binary built, if any; for a TestMain that runs
// the tests itself.
func Remove() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
