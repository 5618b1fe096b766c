package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/internal/testbin"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/transfer"
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

// TestFetchResults runs a bundled job of an unprivileged user (a real
// uid, through the CLI binary) on three real agents until it exits; the
// owner fetches its outputs and checkpoint with 'reclaimnet fetch' as
// herself: exactly what the job wrote, every file and directory hers.
// Another user is refused and nothing is written for him; root on a node
// that does not hold the results (an admin there) fetches them over QUIC
// from a holder. Fetching into the same place again (exit 2) and an
// unknown job fail clearly.
func TestFetchResults(t *testing.T) {
	t.Parallel()
	needRoot(t)
	bin := testbin.Binary(t, "RECLAIMNET_BINARY")
	c, _ := startJobCluster(t)
	for _, n := range c.nodes {
		openToUsers(t, n.agent.DataDir(), bin)
	}
	src := userCwd(t)
	for name, body := range map[string]string{"job.sh": resultJob, "input.txt": "hello results\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	submitter := c.nodes[0]
	if code, out := asUser(t, bin, aliceUID, submitter.agent.DataDir(), "run", "--name", "res", "--workdir", src, "--keep", "48h", "--", "./job.sh"); code != 0 {
		t.Fatalf("alice: run: exit %d: %s", code, out)
	}
	var info localapi.JobInfo
	// Both copies of the results (the host's and its standby's): the third
	// node then holds none and fetches over the network.
	wait.For(t, 90*time.Second, "job res done with its results on two nodes", func() bool {
		j, ok := findJob(call(t, submitter, localapi.Request{Op: localapi.OpJobs}).Jobs, "res")
		info = j
		return ok && j.State == "done" && len(j.ResultsOn) >= policy.DefaultCopies
	})
	if d := time.Until(info.KeptUntil); d < 47*time.Hour || d > 48*time.Hour {
		t.Errorf("results kept until %v, want about 48h from now", info.KeptUntil)
	}
	if info.BundleSize != int64(len(resultJob)+len("hello results\n")) {
		t.Errorf("bundle size %d, want the script's and the input's bytes", info.BundleSize)
	}
	wantBig := strings.Repeat("reclaimnet\n", 300000/11+1)[:300000]
	checkOutputs := func(who, out string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(out, "result.txt")); err != nil || string(b) != "HELLO RESULTS\n" {
			t.Errorf("%s: result.txt %q (%v)", who, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(out, "data", "big.txt")); err != nil || string(b) != wantBig {
			t.Errorf("%s: data/big.txt: %d bytes (%v), want the job's 300000", who, len(b), err)
		}
		if _, err := os.Stat(transfer.StagingDir(out)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: staging directory left after a complete fetch (%v)", who, err)
		}
	}

	// The owner, as herself, into a directory of hers.
	home := userCwd(t)
	if err := os.Chown(home, aliceUID, aliceUID); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(home, "out")
	code, text := asUser(t, bin, aliceUID, submitter.agent.DataDir(), "fetch", "res", "--out", out, "--checkpoint", "--json")
	if code != 0 {
		t.Fatalf("alice: fetch: exit %d: %s", code, text)
	}
	var fi localapi.FetchInfo
	if err := json.Unmarshal([]byte(text), &fi); err != nil || !slices.Contains(info.ResultsOn, fi.From) || fi.Files != 2 ||
		fi.Bytes != 300000+int64(len("HELLO RESULTS\n")) || fi.Out != out || fi.CheckpointOut != out+".checkpoint" {
		t.Errorf("alice: fetch --json %q (%v): want 2 files from one of %v into %s", text, err, info.ResultsOn, out)
	}
	checkOutputs("alice", out)
	for _, root := range []string{out, out + ".checkpoint"} {
		files := 0
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk %s: %v", p, err)
				return nil
			}
			files++
			if fi, err := os.Lstat(p); err != nil || fi.Sys().(*syscall.Stat_t).Uid != aliceUID {
				t.Errorf("%s: not owned by alice (uid %d): %v", p, aliceUID, err)
			}
			return nil
		})
		if root == out && files < 4 {
			t.Errorf("%s: %d entries, want itself, result.txt, data and data/big.txt", root, files)
		}
	}

	// Another user: refused, nothing written.
	bobs := filepath.Join(userCwd(t), "bob")
	if err := os.Chmod(filepath.Dir(bobs), 0o777); err != nil {
		t.Fatal(err)
	}
	if code, text := asUser(t, bin, bobUID, submitter.agent.DataDir(), "fetch", "res", "--out", bobs); code != 1 || !strings.Contains(text, "belongs to uid:60401@node-00") {
		t.Errorf("bob: fetch of alice's job: exit %d, want 1 saying whose it is: %s", code, text)
	}
	if ents, _ := os.ReadDir(filepath.Dir(bobs)); len(ents) != 0 {
		t.Errorf("bob's refused fetch left %v", ents)
	}

	// Root on a node without the results, over the network.
	var fetcher *testNode
	for _, n := range c.nodes {
		if !slices.Contains(info.ResultsOn, n.info.Node) {
			fetcher = n
		}
	}
	if fetcher == nil {
		t.Fatalf("every node holds the results (%v): want one that does not, to fetch over the network", info.ResultsOn)
	}
	rootOut := filepath.Join(t.TempDir(), "out")
	code, text = asUser(t, bin, 0, fetcher.agent.DataDir(), "fetch", "res", "--out", rootOut, "--json")
	if err := json.Unmarshal([]byte(text), &fi); code != 0 || err != nil || fi.Received == 0 || !slices.Contains(info.ResultsOn, fi.From) {
		t.Fatalf("root on %s: fetch: exit %d: %s", fetcher.info.Node, code, text)
	}
	checkOutputs("root", rootOut)
	if code, text := asUser(t, bin, 0, fetcher.agent.DataDir(), "fetch", "res", "--out", rootOut); code != 2 || !strings.Contains(text, "not empty") {
		t.Errorf("fetch into a full destination: exit %d, want 2 saying it is not empty: %s", code, text)
	}
	if code, text := asUser(t, bin, 0, fetcher.agent.DataDir(), "fetch", "nope", "--out", rootOut+"2"); code != 1 || !strings.Contains(text, `no job "nope"`) {
		t.Errorf("fetch of an unknown job: exit %d: %s", code, text)
	}

	// A fetch whose client breaks off after one chunk keeps it in its
	// staging directory; the next one to the same place asks the agent
	// only for the rest.
	resumed := filepath.Join(t.TempDir(), "resumed")
	errStop := errors.New("client stopped after one chunk")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := transfer.Stage(resumed, "", testLogger(), func(st transfer.ChunkStore) (transfer.FetchResult, error) {
		_, err := localapi.Fetch(ctx, fetcher.agent.DataDir(), "res", localapi.FetchRequest{}, &stoppingSink{store: st, left: 1, err: errStop})
		return transfer.FetchResult{}, err
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("broken-off fetch: %v, want the client's stop", err)
	}
	if _, err := os.Stat(resumed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a broken-off fetch left its destination (%v)", err)
	}
	code, text = asUser(t, bin, 0, fetcher.agent.DataDir(), "fetch", "res", "--out", resumed, "--json")
	if err := json.Unmarshal([]byte(text), &fi); code != 0 || err != nil || fi.AlreadyHad != 1 || fi.Received < 1 {
		t.Errorf("resumed fetch: exit %d: %s; want one chunk already here and the rest received", code, text)
	}
	checkOutputs("resumed", resumed)
}

// stoppingSink keeps the first chunks the agent relays in store and fails
// after left of them, as a client killed mid-fetch.
type stoppingSink struct {
	store transfer.ChunkStore
	left  int
	err   error
}

func (s *stoppingSink) Missing(offer []localapi.ChunkRef) []localapi.ChunkRef {
	var refs []ckpt.ChunkRef
	for _, o := range offer {
		h, err := ckpt.ParseHash(o.Hash)
		if err != nil {
			continue
		}
		refs = append(refs, ckpt.ChunkRef{Hash: h, Size: o.Size})
	}
	out := []localapi.ChunkRef{}
	for _, r := range s.store.Missing(refs) {
		out = append(out, localapi.ChunkRef{Hash: r.Hash.String(), Size: r.Size})
	}
	return out
}

func (s *stoppingSink) PutChunk(h [32]byte, data []byte) error {
	if s.left == 0 {
		return s.err
	}
	s.left--
	return s.store.PutChunk(ckpt.Hash(h), data)
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
			// Without the examples directory, whose path depends on
			// where the repository is checked out: the announced paths
			// must fit the gossip metadata's 100 bytes.
			cfg.GuestROPaths = []string{c.scripts, ds}
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
