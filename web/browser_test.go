package web

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// chromium finds Debian's chromium; without it the test fails under CI and
// skips elsewhere.
func chromium(t *testing.T) string {
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

// headless runs one headless Chromium command against url and returns its
// standard output. virtualMs lets the page's timers and fetches run for
// that much virtual time before the DOM is dumped or the screenshot taken.
func headless(t *testing.T, bin, url string, virtualMs int, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", // we run as root, where the sandbox cannot start
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
		t.Fatalf("chromium %v: %v\nstderr (tail): %s", extra, err, tail(stderr.String(), 2000))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// artifactDir is $RECLAIMNET_ARTIFACTS, or a new directory under the
// system temp dir that is kept after the test so the screenshot can be
// looked at.
func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("RECLAIMNET_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("artifact dir: %v", err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "reclaimnet-web-artifacts-")
	if err != nil {
		t.Fatalf("artifact dir: %v", err)
	}
	return d
}

var pollsRe = regexp.MustCompile(`data-polls="(\d+)"`)

// polls returns how many times the page's script has swapped in a fresh
// live part, as the script records it on <body>.
func polls(t *testing.T, dom string) int {
	t.Helper()
	m := pollsRe.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no data-polls attribute in the DOM")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// domRow returns the rendered row with the given id from a dumped DOM.
func domRow(dom, id string) string {
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

// TestBrowser loads the page in headless Chromium: it shows the members
// and a running job, its script keeps it live (a change in the source
// appears without a reload), and a screenshot is written.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	src := newMemSource(scenarioA)
	h := newTestHandler(t, Config{Source: src, Refresh: 200 * time.Millisecond})

	// After serving the page once while armed, the source changes: what
	// the browser then shows can only have come from the script's polls.
	var armed, flipped atomic.Bool
	var livePolls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		switch r.URL.Path {
		case "/":
			if armed.CompareAndSwap(true, false) {
				src.set(scenarioB)
				flipped.Store(true)
			}
		case "/ui/live":
			livePolls.Add(1)
		}
	}))
	defer srv.Close()
	url := srv.URL + "/"

	// 1. The page loads and shows the members and a running job.
	dom := headless(t, bin, url, 1500, "--dump-dom")
	for _, id := range []string{"member-n1", "member-n2", "member-n3", "member-n4"} {
		if domRow(dom, id) == "" {
			t.Errorf("page lacks member row %s", id)
		}
	}
	if row := domRow(dom, "job-llama-ft"); !strings.Contains(row, "running") || !strings.Contains(row, "<td>n1</td>") {
		t.Errorf("job llama-ft: got row %q, want running on n1", row)
	}
	if n := polls(t, dom); n < 1 {
		t.Errorf("the script swapped in the live part %d times, want at least 1 (is JavaScript running?)", n)
	}
	if !strings.Contains(dom, `<span id="conn" class="conn ok">live</span>`) {
		t.Errorf("connection badge does not say live")
	}

	// 2. A screenshot, as an artifact to look at.
	dir := artifactDir(t)
	shot := filepath.Join(dir, "status-page.png")
	headless(t, bin, url, 1000, "--screenshot="+shot, "--window-size=1440,2700")
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("screenshot not written: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 20_000 {
		t.Fatalf("screenshot %s: got %d bytes, want a PNG of a full page", shot, len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	// 3. The source changes right after the page is served; the script's
	// polls must bring the change in.
	before := livePolls.Load()
	armed.Store(true)
	dom = headless(t, bin, url, 2500, "--dump-dom")
	if !flipped.Load() {
		t.Fatalf("the page was not requested; the source never changed")
	}
	if livePolls.Load() == before || polls(t, dom) < 1 {
		t.Fatalf("the page never polled after the change (server saw %d polls, DOM says %d)", livePolls.Load()-before, polls(t, dom))
	}
	if row := domRow(dom, "job-resnet"); !strings.Contains(row, "running") || !strings.Contains(row, "<td>n2</td>") {
		t.Errorf("after the change: job resnet row %q, want running on n2", row)
	}
	if domRow(dom, "job-gpt-small") == "" {
		t.Errorf("after the change: the new job gpt-small is not shown")
	}
	if row := domRow(dom, "member-n3"); !strings.Contains(row, "left") || !strings.Contains(row, "ks-hard") {
		t.Errorf("after the change: member n3 row %q, want left with the kill-switch hard", row)
	}
	if domRow(dom, "transfer-f-resnet-12") != "" || domRow(dom, "reclaim-n3") != "" {
		t.Errorf("after the change: the finished transfer or the pending reclaim is still shown")
	}
}
