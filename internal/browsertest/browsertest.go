// Package browsertest is test support for the tests that load the status
// page in a real browser (Debian's headless Chromium): finding the browser,
// running it against a URL, and reading the dumped DOM the page's templates
// and script produce. It is imported only by _test.go files.
//
// Without Chromium a browser test fails when CI=true and skips elsewhere,
// following the project's rule for tests that need the machine's tools.
package browsertest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Chromium returns the path of Debian's chromium; without it the test fails
// under CI=true and skips elsewhere.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("chromium not found (Debian package chromium); CI=true requires the browser test")
	}
	t.Skip("chromium not found (install Debian's chromium package to run the browser test)")
	return ""
}

// Headless runs one headless Chromium command against url and returns its
// standard output (the DOM with --dump-dom). virtualMs lets the page's
// timers and fetches run for that much virtual time before the DOM is
// dumped or the screenshot taken; extra are further Chromium flags.
func Headless(t testing.TB, bin, url string, virtualMs int, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", // tests run as root, where the sandbox cannot start
		"--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=" + strconv.Itoa(virtualMs),
	}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		errOut := stderr.String()
		if len(errOut) > 2000 {
			errOut = errOut[len(errOut)-2000:]
		}
		t.Fatalf("chromium %v: %v\nstderr (tail): %s", extra, err, errOut)
	}
	return stdout.String()
}

// ArtifactDir is $RECLAIMNET_ARTIFACTS, or a new directory under the
// system temp dir named after what (e.g. "web"), kept after the test so a
// screenshot can be looked at.
func ArtifactDir(t testing.TB, what string) string {
	t.Helper()
	if d := os.Getenv("RECLAIMNET_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("artifact dir: %v", err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "reclaimnet-"+what+"-artifacts-")
	if err != nil {
		t.Fatalf("artifact dir: %v", err)
	}
	return d
}

var pollsRe = regexp.MustCompile(`data-polls="(\d+)"`)

// Polls returns how many times the page's script swapped in a fresh live
// part, as the script records it on <body>; -1 when the DOM has no such
// record (the script never ran).
func Polls(dom string) int {
	m := pollsRe.FindStringSubmatch(dom)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Row returns the rendered table row with the given element id from a
// dumped DOM, from the id to the row's end; "" when there is none.
func Row(dom, id string) string {
	i := strings.Index(dom, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	j := strings.Index(dom[i:], "</tr>")
	if j < 0 {
		return dom[i:]
	}
	return dom[i : i+j]
}
