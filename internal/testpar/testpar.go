// Package testpar raises how many parallel tests a test package runs at
// once, for packages whose tests spend their time waiting (timeouts,
// notices, gossip) rather than computing: go test's default, GOMAXPROCS,
// leaves a two-core machine mostly idle while such tests wait.
package testpar

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Main runs the package's tests with up to n parallel tests at once, then
// the cleanups (removing what the tests built), and exits with the tests'
// result; call it from TestMain. An explicit -parallel on the command line
// wins.
func Main(m *testing.M, n int, cleanups ...func()) {
	flag.Parse()
	if err := SetDefault(n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// SetDefault sets -test.parallel to n unless the command line (or an
// earlier call) set it; the test binary's flags must be parsed.
func SetDefault(n int) error {
	if n < 1 {
		return fmt.Errorf("testpar: %d parallel tests: want at least 1", n)
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return nil
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("testpar: %w", err)
	}
	return nil
}
