package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// bundleProbe runs from its bundle inside the sandbox: it reads its input,
// tries to change the bundle and writes to its HOME.
const bundleProbe = `#!/bin/sh
echo "input $(cat data/input.txt)"
echo "pwd $PWD"
if echo x >> data/input.txt 2>/dev/null; then echo "append allowed"; else echo "append refused"; fi
if touch new 2>/dev/null; then echo "create allowed"; else echo "create refused"; fi
if rm data/input.txt 2>/dev/null; then echo "delete allowed"; else echo "delete refused"; fi
if touch "$HOME/h" 2>/dev/null; then echo "home writable"; else echo "home read-only"; fi
echo "probe done"
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.1; done
`

// TestBundleIsTheSandboxedWorkdir submits a job the way 'reclaimnet run
// --workdir DIR -- ./probe.sh' does, from a directory the sandbox does not
// show the job: the job runs as a guest in the bundle's layout, reads its
// input there, cannot change it, and has a writable HOME.
func TestBundleIsTheSandboxedWorkdir(t *testing.T) {
	t.Parallel()
	_, n := startSolo(t, nil)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"probe.sh": bundleProbe, "data/input.txt": "from-the-bundle\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, n, localapi.JobRequest{Name: "bundled", Command: []string{"./probe.sh"}, GPUs: 1, Workdir: src})
	log := waitLog(t, n, "bundled", "probe done", 60*time.Second)
	layout := filepath.Join(n.agent.DataDir(), jobsDirName, "bundled", "bundle")
	for _, want := range []string{"input from-the-bundle", "pwd " + layout, "append refused", "create refused", "delete refused", "home writable"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("job log lacks %q:\n%s", want, log)
		}
	}
	if b, err := os.ReadFile(filepath.Join(src, "data", "input.txt")); err != nil || string(b) != "from-the-bundle\n" {
		t.Errorf("the submitted directory changed: %q, %v", b, err)
	}
}

// resultJob reads its input from its bundle and writes two outputs, then
// exits 0 (after a pause, so that the job has a standby to keep them).
const resultJob = `#!/bin/sh
trap 'touch "$RECLAIMNET_CKPT_DIR/.complete"' USR1
touch "$RECLAIMNET_READY_FILE"
i=0
while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done
tr a-z A-Z < input.txt > "$RECLAIMNET_OUTPUT_DIR/result.txt"
mkdir "$RECLAIMNET_OUTPUT_DIR/data"
yes reclaimnet | head -c 300000 > "$RECLAIMNET_OUTPUT_DIR/data/big.txt"
`

// TestFetchResults runs a bundled job on three real agents until it exits,
// then fetches its outputs through the control socket (what 'reclaimnet
// fetch' sends) on a node that does not hold them: over QUIC from a
// holder, exactly what the job wrote. Fetching into the same place again,
// and an unknown job, fail clearly.
func TestFetchResults(t *testing.T) {
	t.Parallel()
	c, _ := startJobCluster(t)
	src := t.TempDir()
	for name, body := range map[string]string{"job.sh": resultJob, "input.txt": "hello results\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	submitter := c.nodes[0]
	submit(t, submitter, localapi.JobRequest{Name: "res", Command: []string{"./job.sh"}, GPUs: 1, Workdir: src, Keep: 48 * time.Hour})
	var info localapi.JobInfo
	wait.For(t, 90*time.Second, "job res done with its results listed", func() bool {
		j, ok := findJob(call(t, submitter, localapi.Request{Op: localapi.OpJobs}).Jobs, "res")
		info = j
		return ok && j.State == "done" && len(j.ResultsOn) > 0
	})
	if d := time.Until(info.KeptUntil); d < 47*time.Hour || d > 48*time.Hour {
		t.Errorf("results kept until %v, want about 48h from now", info.KeptUntil)
	}
	if info.BundleSize != int64(len(resultJob)+len("hello results\n")) {
		t.Errorf("bundle size %d, want the script's and the input's bytes", info.BundleSize)
	}
	var fetcher *testNode
	for _, n := range c.nodes {
		if !slices.Contains(info.ResultsOn, n.info.Node) {
			fetcher = n
		}
	}
	if fetcher == nil {
		t.Fatalf("every node holds the results (%v): want one that does not, to fetch over the network", info.ResultsOn)
	}
	out := filepath.Join(t.TempDir(), "out")
	resp := call(t, fetcher, localapi.Request{Op: localapi.OpFetch, JobID: "res", Fetch: &localapi.FetchRequest{Out: out, CheckpointOut: out + ".checkpoint"}})
	if resp.Error != "" || resp.Fetched == nil {
		t.Fatalf("fetch: %s (%s)", resp.Error, resp.Kind)
	}
	if f := resp.Fetched; !slices.Contains(info.ResultsOn, f.From) || f.Files != 2 || f.Bytes != 300000+int64(len("HELLO RESULTS\n")) || f.Received == 0 {
		t.Errorf("fetched %+v, want 2 files from one of %v, received over the network", f, info.ResultsOn)
	}
	if b, err := os.ReadFile(filepath.Join(out, "result.txt")); err != nil || string(b) != "HELLO RESULTS\n" {
		t.Errorf("result.txt %q (%v)", b, err)
	}
	want := strings.Repeat("reclaimnet\n", 300000/11+1)[:300000]
	if b, err := os.ReadFile(filepath.Join(out, "data", "big.txt")); err != nil || string(b) != want {
		t.Errorf("data/big.txt: %d bytes (%v), want the job's 300000", len(b), err)
	}
	if resp := call(t, fetcher, localapi.Request{Op: localapi.OpFetch, JobID: "res", Fetch: &localapi.FetchRequest{Out: out}}); resp.Kind != localapi.KindBadRequest ||
		!strings.Contains(resp.Error, "exists") {
		t.Errorf("fetch into a full destination: kind %q, %q; want a bad request saying it exists", resp.Kind, resp.Error)
	}
	if resp := call(t, fetcher, localapi.Request{Op: localapi.OpFetch, JobID: "nope", Fetch: &localapi.FetchRequest{Out: out + "2"}}); resp.Kind != localapi.KindUnknownJob {
		t.Errorf("fetch of an unknown job: kind %q, %q", resp.Kind, resp.Error)
	}
}

// roPathJob reads its dataset and tries to change it.
const roPathJob = `#!/bin/sh
echo "read $(cat "$DATASET/train.txt")"
if echo x >> "$DATASET/train.txt" 2>/dev/null; then echo "dataset writable"; else echo "dataset read-only"; fi
echo "probe done"
trap 'touch "$RECLAIMNET_CKPT_DIR/.complete"' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.1; done
`

// TestROPathNodesOnly: a job that declares a path (run --ro-path) is
// placed only on the node whose owner announces it, reads it there
// read-only; a path no node announces is refused at submit.
func TestROPathNodesOnly(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	ds := t.TempDir()
	if err := os.Chmod(ds, 0o755); err != nil {
		t.Fatal(err)
	}
	imagenet := filepath.Join(ds, "imagenet")
	if err := os.Mkdir(imagenet, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imagenet, "train.txt"), []byte("cats and dogs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cfg := c.config("node-0" + strconv.Itoa(i))
		cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
		if i == 1 {
			cfg.GuestROPaths = append(cfg.GuestROPaths, ds)
		}
		c.start(cfg)
	}
	c.waitConfig(3, 3, 60*time.Second)
	submitter := c.nodes[0]
	wait.For(t, 30*time.Second, "node-01's paths in the registry", func() bool {
		return submitter.agent.Coordinator().State().Nodes["node-01"].HasPaths([]string{imagenet})
	})
	if resp := call(t, submitter, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "nowhere", Command: []string{"/bin/true"},
		GPUs: 1, ROPaths: []string{"/no/such/dataset"}}}); resp.Kind != localapi.KindBadRequest || !strings.Contains(resp.Error, "no node") {
		t.Errorf("run with a path no node has: kind %q, %q; want a bad request saying no node has it", resp.Kind, resp.Error)
	}
	script := c.writeScript("ro.sh", roPathJob)
	submit(t, submitter, localapi.JobRequest{Name: "ds", Command: []string{"/bin/sh", script}, GPUs: 1, ROPaths: []string{imagenet},
		Env: []string{"DATASET=" + imagenet}})
	var info localapi.JobInfo
	wait.For(t, 60*time.Second, "job ds running", func() bool {
		j, ok := findJob(call(t, submitter, localapi.Request{Op: localapi.OpJobs}).Jobs, "ds")
		info = j
		return ok && j.State == "running"
	})
	if info.Node != "node-01" {
		t.Fatalf("job ds runs on %s, want node-01, the only node with its path", info.Node)
	}
	log := waitLog(t, c.nodes[1], "ds", "probe done", 60*time.Second)
	for _, want := range []string{"read cats and dogs", "dataset read-only"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("job log lacks %q:\n%s", want, log)
		}
	}
}
