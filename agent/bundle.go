package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// takeBundle stores the directory jr names as the job's bundle, resolves
// the command against it and records both in spec. The bundle is pinned for
// the job in the local store, so eviction keeps it while the job needs it.
// A caller's mistake (a missing or unreadable directory, a refused entry,
// a bundle over the cap, a command found neither in the bundle nor on the
// guest PATH) is a bad request: the CLI exits 2. So is an entry the
// caller could not have read (checkReadableBy): the agent reads as root.
func (a *Agent) takeBundle(jr *localapi.JobRequest, spec *state.JobSpec, who caller) *localapi.Response {
	bad := func(err error) *localapi.Response {
		return &localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindBadRequest}
	}
	if !filepath.IsAbs(jr.Workdir) {
		return bad(fmt.Errorf("workdir %q: not an absolute path", jr.Workdir))
	}
	if jr.MaxBundle < 0 {
		return bad(fmt.Errorf("bundle size cap %d: must not be negative", jr.MaxBundle))
	}
	store := a.jobs.store
	b, err := store.AddBundle(jr.Workdir, ckpt.BundleOptions{MaxBytes: jr.MaxBundle})
	if err != nil {
		switch {
		case errors.Is(err, ckpt.ErrBadBundle):
			return bad(err)
		case errors.Is(err, ckpt.ErrDiskFull), errors.Is(err, ckpt.ErrQuota):
			// Not the caller's mistake, and nothing was stored: the
			// submission can be repeated once this node has room.
			return &localapi.Response{Error: fmt.Sprintf("run: %v: this node's data directory %s cannot hold the bundle; nothing was submitted",
				err, a.cfg.DataDir), Kind: localapi.KindDiskFull}
		}
		return &localapi.Response{Error: "run: " + err.Error(), Kind: localapi.KindInternal}
	}
	root, err := filepath.EvalSymlinks(jr.Workdir)
	if err != nil {
		return bad(err)
	}
	// The bundle stays unpinned when refused: retention evicts it, and
	// nothing outside the root-only store ever saw its bytes.
	if err := checkReadableBy(who, root, b.Manifest.Files); err != nil {
		return bad(fmt.Errorf("workdir %s: %w", jr.Workdir, err))
	}
	argv0, err := resolveCommand(b.Manifest.Files, root, spec.Command[0], lookGuestPath)
	if err != nil {
		return bad(err)
	}
	spec.Command[0] = argv0
	spec.Bundle, spec.BundleSize, spec.BundleFrom = b.ID.String(), b.Size, policy.NodeID(a.cfg.Name)
	if err := store.Pin(ckpt.BundleKey(b.ID), 1, jr.Name, time.Time{}); err != nil {
		return &localapi.Response{Error: "run: pin bundle: " + err.Error(), Kind: localapi.KindInternal}
	}
	a.logger.Info("bundle stored", "job", jr.Name, "bundle", b.ID.String(), "size", b.Size, "stored", b.Stored)
	return nil
}

// unpinBundle drops the job's pin on a bundle whose job was not submitted.
func (a *Agent) unpinBundle(bundle, job string) {
	id, err := ckpt.ParseBundleID(bundle)
	if err == nil {
		err = a.jobs.store.Unpin(ckpt.BundleKey(id), 1, job)
	}
	if err != nil {
		a.logger.Warn("unpin bundle", "bundle", bundle, "job", job, "err", err)
	}
}

// resolveCommand finds a job's program: a relative path (or a bare name
// that is a file at the bundle's top) names a file of the bundle, an
// absolute path under the bundle's directory (root, symlinks resolved) is
// made relative to it, and anything else must exist on the host (onHost:
// a bare name is looked up on the guest PATH). The result is what the
// job's record keeps: "./rel" for a file of the bundle, which every node
// resolves in its own layout (jobs.BundleCommand).
func resolveCommand(files []ckpt.File, root, argv0 string, onHost func(string) error) (string, error) {
	inBundle := func(rel string) bool {
		for _, f := range files {
			if f.Path == rel && f.Mode&ckpt.ModeDir == 0 {
				return true
			}
		}
		return false
	}
	switch {
	case filepath.IsAbs(argv0):
		if real, err := filepath.EvalSymlinks(filepath.Dir(argv0)); err == nil {
			if rel, err := filepath.Rel(root, filepath.Join(real, filepath.Base(argv0))); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				if !inBundle(filepath.ToSlash(rel)) {
					return "", fmt.Errorf("command %s: not a file of the bundle %s (left out by %s?)", argv0, root, ckpt.IgnoreFile)
				}
				return "./" + filepath.ToSlash(rel), nil
			}
		}
		if err := onHost(argv0); err != nil {
			return "", fmt.Errorf("command %s: %w (a program outside the bundle must exist on every node)", argv0, err)
		}
		return argv0, nil
	case strings.Contains(argv0, "/"):
		rel := path.Clean(filepath.ToSlash(argv0))
		if rel == ".." || strings.HasPrefix(rel, "../") || !inBundle(rel) {
			return "", fmt.Errorf("command %s: not a file of the bundle %s", argv0, root)
		}
		return "./" + rel, nil
	case inBundle(argv0):
		return "./" + argv0, nil
	}
	if err := onHost(argv0); err != nil {
		return "", fmt.Errorf("command %s: neither a file of the bundle %s nor on the PATH jobs get (%s)", argv0, root, sandbox.GuestPATH)
	}
	return argv0, nil
}

// lookGuestPath checks that name runs on this host: an absolute path that is
// an executable file, or a bare name found on the PATH a job gets.
func lookGuestPath(name string) error {
	if filepath.IsAbs(name) {
		return executable(name)
	}
	for _, d := range filepath.SplitList(sandbox.GuestPATH) {
		if executable(filepath.Join(d, name)) == nil {
			return nil
		}
	}
	return fmt.Errorf("not found on %s", sandbox.GuestPATH)
}

func executable(p string) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// announcedPaths are the owner's guest read-only paths that exist here,
// cleaned: what this node tells the cluster it has for jobs that declare
// paths (run --ro-path).
func (a *Agent) announcedPaths() []string {
	var out []string
	for _, p := range a.cfg.GuestROPaths {
		p = filepath.Clean(p)
		if _, err := os.Stat(p); err != nil {
			a.logger.Warn("guest read-only path not announced: it does not exist here", "path", p, "err", err)
			continue
		}
		out = append(out, p)
	}
	return out
}

// checkROPaths refuses read-only paths that are not absolute and clean, and
// those no active node announces: such a job could never be placed.
func checkROPaths(st *state.State, paths []string) error {
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("read-only path %q: want an absolute, clean path", p)
		}
		found := false
		for _, n := range st.Nodes {
			if n.State == state.NodeActive && n.HasPaths([]string{p}) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("read-only path %s: no node of the cluster has it among the paths its owner lets guest jobs read", p)
		}
	}
	return nil
}
