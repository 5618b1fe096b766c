package web

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/browsertest"
)

// TestBrowser loads the page in headless Chromium: it shows the members
// and a running job, an assumed capacity as assumed and a recovery's real
// downtime, its script keeps it live (a change in the source appears
// without a reload), and a screenshot is written.
func TestBrowser(t *testing.T) {
	bin := browsertest.Chromium(t)
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
	dom := browsertest.Headless(t, bin, url, 1500, "--dump-dom")
	for _, id := range []string{"member-n1", "member-n2", "member-n3", "member-n4"} {
		if browsertest.Row(dom, id) == "" {
			t.Errorf("page lacks member row %s", id)
		}
	}
	if row := browsertest.Row(dom, "job-llama-ft"); !strings.Contains(row, "running") || !strings.Contains(row, "<td>n1</td>") ||
		!strings.Contains(row, `<span class="badge under-way">checkpointing</span>`) {
		t.Errorf("job llama-ft: got row %q, want running on n1, checkpointing", row)
	}
	// The replicated end states and a pending reason, as the browser
	// renders them.
	for id, want := range map[string][]string{
		"job-vit":  {"js-failed", "signal killed (out of memory)", "on n2", "allocating 40 GiB"},
		"job-t5":   {"js-cancelled", "cancelled by alice on n1"},
		"job-huge": {"pending", "waits: needs 16 GPUs; the largest node has 4"},
	} {
		row := browsertest.Row(dom, id)
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("%s: row %q lacks %q", id, row, w)
			}
		}
	}
	if n := browsertest.Polls(dom); n < 1 {
		t.Errorf("the script swapped in the live part %d times (-1: no record on <body>), want at least 1 (is JavaScript running?)", n)
	}
	if !strings.Contains(dom, `<span id="conn" class="conn ok">live</span>`) {
		t.Errorf("connection badge does not say live")
	}
	// The default capacity nobody measured is marked assumed, not
	// coloured as a share; the emergency recovery shows its downtime
	// until readiness.
	if cell := browsertest.Row(dom, "bw-sci-sci"); !strings.Contains(cell, `class="unmeasured"`) || !strings.Contains(cell, ">assumed</span>") {
		t.Errorf("bandwidth sci → sci: got %q, want the assumed mark and no share colour", cell)
	}
	if li := browsertest.Row(dom, "outcome-n5-vit"); !strings.Contains(li, "down 1m01s") {
		t.Errorf("history n5/vit: got %q, want its downtime 1m01s", li)
	}

	// 2. A screenshot, as an artifact to look at.
	dir := browsertest.ArtifactDir(t, "web")
	shot := filepath.Join(dir, "status-page.png")
	browsertest.Headless(t, bin, url, 1000, "--screenshot="+shot, "--window-size=1440,2700")
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
	dom = browsertest.Headless(t, bin, url, 2500, "--dump-dom")
	if !flipped.Load() {
		t.Fatalf("the page was not requested; the source never changed")
	}
	if livePolls.Load() == before || browsertest.Polls(dom) < 1 {
		t.Fatalf("the page never polled after the change (server saw %d polls, DOM says %d)", livePolls.Load()-before, browsertest.Polls(dom))
	}
	if row := browsertest.Row(dom, "job-resnet"); !strings.Contains(row, "running") || !strings.Contains(row, "<td>n2</td>") {
		t.Errorf("after the change: job resnet row %q, want running on n2", row)
	}
	if browsertest.Row(dom, "job-gpt-small") == "" {
		t.Errorf("after the change: the new job gpt-small is not shown")
	}
	if row := browsertest.Row(dom, "member-n3"); !strings.Contains(row, "left") || !strings.Contains(row, "ks-hard") {
		t.Errorf("after the change: member n3 row %q, want left with the kill-switch hard", row)
	}
	if browsertest.Row(dom, "transfer-f-resnet-12") != "" || browsertest.Row(dom, "reclaim-n3") != "" {
		t.Errorf("after the change: the finished transfer or the pending reclaim is still shown")
	}
}
