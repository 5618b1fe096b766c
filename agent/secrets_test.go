package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
)

// TestSecretEnv: a secret given with run --secret-env reaches the job's
// environment on a node that is not a voter (released by the voter,
// resealed to that node), is never written in the clear to the Raft log
// or anywhere in the data dirs, and is refused to a node that does not run
// the job.
func TestSecretEnv(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	a := c.bootstrap("lab-a")
	wait.For(t, 30*time.Second, "the cluster secrets key published", func() bool {
		return len(a.agent.Coordinator().State().SecretsKey) > 0
	})
	tok := createToken(t, a, time.Hour, 0)
	cfg := c.tokenConfig("lab-b", tok, a)
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	b := c.start(cfg)
	wait.For(t, 30*time.Second, "lab-b admitted with the replicated state", func() bool {
		return len(b.agent.Coordinator().State().SecretsKey) > 0
	})
	const secret = "sk-live-7f3a9c1e5b2d"
	script := c.writeScript("secret.sh", "#!/bin/sh\nprintf %s \"$API_KEY\" | sha256sum | cut -d' ' -f1 > \"$HOME/secret.sha\"\nsleep 300\n")
	resp := call(t, b, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "sec", Command: []string{"/bin/sh", script},
		GPUs: 1, Secrets: map[string]string{"API_KEY": secret}}})
	if resp.Error != "" {
		t.Fatalf("run: %s", resp.Error)
	}
	sum := sha256.Sum256([]byte(secret))
	want := hex.EncodeToString(sum[:])
	var got string
	wait.For(t, 90*time.Second, "the job wrote the hash of its secret", func() bool {
		files, _ := filepath.Glob(c.jobFiles("sec", "secret.sha"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
				got = strings.TrimSpace(string(b))
				return true
			}
		}
		return false
	})
	if got != want {
		t.Fatalf("the job saw a secret hashing to %q, want %q", got, want)
	}
	if r, _ := nodeRecord(a, "lab-b"); r.Role.String() == "voter" {
		t.Fatal("lab-b is a voter: the test means to take the reseal path")
	}
	j, _ := a.agent.Coordinator().Store().Job("sec")
	if len(j.Spec.Secrets) != 1 || bytes.Contains(j.Spec.Secrets[0].Sealed, []byte(secret)) || strings.Contains(strings.Join(j.Spec.Env, " "), secret) {
		t.Errorf("job record holds %+v", j.Spec)
	}
	for _, n := range []*testNode{a, b} {
		filepath.WalkDir(n.agent.DataDir(), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(p)
			if err == nil && bytes.Contains(data, []byte(secret)) {
				t.Errorf("%s: the secret is in %s in the clear", n.info.Node, p)
			}
			return nil
		})
	}
	// Another member asking for it is refused.
	other := c.start(c.tokenConfig("lab-c", tok, a))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := (&enroll.Client{}).JobSecret(ctx, a.info.RaftAddr, other.agent.tls, "sec", "API_KEY"); !errors.Is(err, enroll.ErrNotHost) {
		t.Errorf("lab-c asking for lab-b's job secret: %v, want ErrNotHost", err)
	}
}
