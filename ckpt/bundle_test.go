package ckpt

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bundleTree is a small working directory: code, data, an empty
// directory, symlinks inside, an executable.
func bundleTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{
		"train.py":        []byte("print('hi')\n"),
		"data/input.bin":  randBytes(20, 200<<10),
		"data/labels.txt": []byte("a\nb\n"),
		"cache/big.bin":   randBytes(21, 100<<10),
	})
	os.Chmod(filepath.Join(dir, "train.py"), 0o755)
	os.Chmod(filepath.Join(dir, "data/labels.txt"), 0o600)
	os.Chmod(filepath.Join(dir, "data/input.bin"), 0o644)
	os.Mkdir(filepath.Join(dir, "empty"), 0o750)
	os.Symlink("data/input.bin", filepath.Join(dir, "input"))
	os.Symlink("../data", filepath.Join(dir, "empty/data-link"))
	os.WriteFile(filepath.Join(dir, IgnoreFile), []byte("cache/\n*.tmp\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "scratch.tmp"), []byte("x"), 0o644)
	return dir
}

func TestBundleContents(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	dir := bundleTree(t)
	b, err := s.AddBundle(dir, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]File{}
	for _, f := range b.Manifest.Files {
		got[f.Path] = f
	}
	for _, p := range []string{"cache", "cache/big.bin", "scratch.tmp"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s: in the bundle, but %s ignores it", p, IgnoreFile)
		}
	}
	for p, mode := range map[string]uint32{"train.py": 0o755, "data/labels.txt": 0o600, "data": ModeDir | 0o755, "empty": ModeDir | 0o750, "input": ModeSymlink | 0o777, IgnoreFile: 0o644} {
		if f, ok := got[p]; !ok || f.Mode != mode {
			t.Errorf("%s: mode %o (present %v), want %o", p, f.Mode, ok, mode)
		}
	}
	if got["input"].Target != "data/input.bin" || got["empty/data-link"].Target != "../data" {
		t.Errorf("symlink targets: %q, %q", got["input"].Target, got["empty/data-link"].Target)
	}
	if want := int64(200<<10 + 4 + 12 + len("cache/\n*.tmp\n") + len("data/input.bin") + len("../data")); b.Size != want {
		t.Errorf("size %d, want %d", b.Size, want)
	}
	if b.ID != BundleIDOf(b.Manifest.Files) || b.Manifest.JobID != BundleKey(b.ID) {
		t.Errorf("bundle stored as %s, id %s", b.Manifest.JobID, b.ID)
	}
	if id, ok := IsBundleKey(b.Manifest.JobID); !ok || id != b.ID {
		t.Errorf("IsBundleKey(%s) = %s, %v", b.Manifest.JobID, id, ok)
	}
	if err := s.HasBundle(b.ID); err != nil {
		t.Error(err)
	}
}

func TestBundleSizeCap(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"a": randBytes(1, 100<<10), "b/c": randBytes(2, 200<<10)})
	_, err := s.AddBundle(dir, BundleOptions{MaxBytes: 300<<10 - 1})
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrBadBundle) || !errors.Is(err, ErrBundleTooLarge) {
		t.Fatalf("over the cap: got %v, want a *TooLargeError matching ErrBadBundle and ErrBundleTooLarge", err)
	}
	if tl.Size != 300<<10 || tl.Cap != 300<<10-1 || tl.AtLeast {
		t.Errorf("error says size %d cap %d (at least %v), want 307200 and 307199", tl.Size, tl.Cap, tl.AtLeast)
	}
	for _, want := range []string{"300.0 KiB", "307200 bytes", "307199 bytes", IgnoreFile} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	if s.Usage() != 0 {
		t.Errorf("a refused bundle left %d bytes in the store", s.Usage())
	}
	if _, err := s.AddBundle(dir, BundleOptions{MaxBytes: 300 << 10}); err != nil {
		t.Errorf("at the cap exactly: %v", err)
	}
	if _, err := s.AddBundle(dir, BundleOptions{MaxBytes: -1}); err != nil {
		t.Errorf("no cap: %v", err)
	}
}

func TestBundleDedupeAcrossResubmission(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	dir := bundleTree(t)
	b1, err := s.AddBundle(dir, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b1.Stored == 0 {
		t.Fatal("first submission stored nothing")
	}
	usage := s.Usage()
	// Touching every file (new times) changes nothing that names a bundle.
	later := time.Now().Add(time.Hour)
	filepath.Walk(dir, func(p string, info os.FileInfo, _ error) error {
		if info.Mode()&os.ModeSymlink == 0 {
			os.Chtimes(p, later, later)
		}
		return nil
	})
	b2, err := s.AddBundle(dir, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b2.ID != b1.ID || b2.Stored != 0 || s.Usage() != usage || b2.Manifest.Hash() != b1.Manifest.Hash() {
		t.Fatalf("unchanged bundle: id %s then %s, stored %d bytes the second time (usage %d then %d)", b1.ID, b2.ID, b2.Stored, usage, s.Usage())
	}
	// One changed file: a new ID, and only its chunks are new.
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("print('bye')\n"), 0o755)
	b3, err := s.AddBundle(dir, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b3.ID == b1.ID || b3.Stored != int64(len("print('bye')\n")) {
		t.Fatalf("one file changed: id same %v, stored %d bytes, want %d", b3.ID == b1.ID, b3.Stored, len("print('bye')\n"))
	}
	// A mode change is a change too.
	os.Chmod(filepath.Join(dir, "train.py"), 0o644)
	b4, err := s.AddBundle(dir, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b4.ID == b3.ID || b4.Stored != 0 {
		t.Fatalf("mode changed: same id %v, stored %d", b4.ID == b3.ID, b4.Stored)
	}
}

func TestBundleRefusesEntries(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	cases := []struct {
		name  string
		setup func(dir string) error
	}{
		{"missing directory", func(dir string) error { return os.RemoveAll(dir) }},
		{"a FIFO", func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644) }},
		{"an absolute symlink", func(dir string) error { return os.Symlink("/etc/passwd", filepath.Join(dir, "l")) }},
		{"a symlink climbing out", func(dir string) error { return os.Symlink("../outside", filepath.Join(dir, "l")) }},
		{"a dangling symlink", func(dir string) error { return os.Symlink("nothere", filepath.Join(dir, "l")) }},
		{"a symlink to an ignored file", func(dir string) error {
			os.WriteFile(filepath.Join(dir, "secret.key"), []byte("k"), 0o600)
			os.WriteFile(filepath.Join(dir, IgnoreFile), []byte("*.key\n"), 0o644)
			return os.Symlink("secret.key", filepath.Join(dir, "l"))
		}},
		// Lexically "self/.." is the top, but the kernel follows self to
		// the top first and .. leaves it.
		{"a symlink leaving through another", func(dir string) error {
			if err := os.Symlink(".", filepath.Join(dir, "self")); err != nil {
				return err
			}
			return os.Symlink("self/..", filepath.Join(dir, "l"))
		}},
		{"a symlink loop", func(dir string) error {
			os.Symlink("b", filepath.Join(dir, "a"))
			return os.Symlink("a", filepath.Join(dir, "b"))
		}},
		{"a bad ignore file", func(dir string) error { return os.WriteFile(filepath.Join(dir, IgnoreFile), []byte("a\x00"), 0o644) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("fine"), 0o644)
			if err := c.setup(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := s.AddBundle(dir, BundleOptions{}); !errors.Is(err, ErrBadBundle) {
				t.Fatalf("got %v, want ErrBadBundle", err)
			}
		})
	}
	if s.Usage() != 0 || len(s.Jobs()) != 0 {
		t.Errorf("refused bundles left %d bytes, jobs %v", s.Usage(), s.Jobs())
	}
	// An ignored FIFO is no problem: it is never looked at.
	dir := t.TempDir()
	syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644)
	os.WriteFile(filepath.Join(dir, IgnoreFile), []byte("pipe\n"), 0o644)
	if _, err := s.AddBundle(dir, BundleOptions{}); err != nil {
		t.Errorf("ignored FIFO: %v", err)
	}
}

func TestBundleManifestMustMatchItsID(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	b, err := s.AddBundle(bundleTree(t), BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := *b.Manifest
	other.Files = append([]File(nil), b.Manifest.Files...)
	other.Files[len(other.Files)-1].Mode = 0o777 // another bundle under the same key
	if _, err := ParseManifest(other.Encode()); !errors.Is(err, ErrBadManifest) {
		t.Errorf("entries that hash to another ID: got %v, want ErrBadManifest", err)
	}
	timed := *b.Manifest
	timed.Created = time.Now()
	if err := timed.Validate(); !errors.Is(err, ErrBadManifest) {
		t.Errorf("a bundle with a creation time: got %v, want ErrBadManifest", err)
	}
	setid := &Manifest{JobID: "x", Version: 1, Files: []File{{Path: "a", Mode: 0o4755}}}
	id := BundleIDOf(setid.Files)
	setid.JobID = BundleKey(id)
	if err := setid.Validate(); !errors.Is(err, ErrBadManifest) {
		t.Errorf("a set-uid file in a bundle: got %v, want ErrBadManifest", err)
	}
}

// runAs runs a shell command as an unprivileged user and returns its
// error (nil: every step of it succeeded).
func runAs(t *testing.T, script string) error {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the read-only probe needs root (to run as another user)")
		}
		t.Skip("the read-only probe needs root")
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody: %s: %v %s", script, err, out)
	return err
}

func TestLayoutBundleReadOnly(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	src := bundleTree(t)
	b, err := s.AddBundle(src, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The layout sits where an unprivileged job can reach it.
	parent := t.TempDir()
	os.Chmod(parent, 0o755)
	os.Chmod(filepath.Dir(parent), 0o711) // the test's own temp root
	dst := filepath.Join(parent, "work")
	t.Cleanup(func() { RemoveLayout(dst) })
	if err := s.LayoutBundle(b.ID, dst); err != nil {
		t.Fatal(err)
	}
	if err := s.VerifyLayout(b.ID, dst); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dst, "input")) // through the symlink
	want, _ := os.ReadFile(filepath.Join(src, "data/input.bin"))
	if !bytes.Equal(got, want) {
		t.Error("input through its symlink differs from the source")
	}
	filepath.Walk(dst, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode()&os.ModeSymlink == 0 && info.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s: mode %v has write bits", p, info.Mode())
		}
		return nil
	})
	if st, _ := os.Stat(filepath.Join(dst, "train.py")); st.Mode().Perm() != 0o555 {
		t.Errorf("train.py mode %v, want r-xr-xr-x (exec bits kept)", st.Mode().Perm())
	}
	// A job running as another user reads everything (a file private to
	// its submitter, data/labels.txt 0600, too: the job is the submitter's)
	// and changes nothing.
	if err := runAs(t, "cat "+filepath.Join(dst, "train.py")+" "+filepath.Join(dst, "input")+" "+filepath.Join(dst, "data", "labels.txt")+" >/dev/null && ls "+filepath.Join(dst, "data")); err != nil {
		t.Fatalf("an unprivileged user cannot read the layout: %v", err)
	}
	for _, probe := range []string{
		"echo x >> " + filepath.Join(dst, "train.py"),
		"touch " + filepath.Join(dst, "new"),
		"touch " + filepath.Join(dst, "data", "new"),
		"rm -f " + filepath.Join(dst, "data", "labels.txt"),
		"mv " + filepath.Join(dst, "data") + " " + filepath.Join(dst, "d2"),
		"chmod 777 " + filepath.Join(dst, "train.py"),
	} {
		if runAs(t, probe) == nil {
			t.Errorf("as an unprivileged user, %q succeeded", probe)
		}
	}
	if err := s.VerifyLayout(b.ID, dst); err != nil {
		t.Fatalf("after the probes: %v", err)
	}
	// A second layout at the same place is refused; tampering is seen.
	if err := s.LayoutBundle(b.ID, dst); err == nil {
		t.Error("layout over an existing directory succeeded")
	}
	os.Chmod(filepath.Join(dst, "data"), 0o755)
	os.WriteFile(filepath.Join(dst, "data", "extra"), []byte("x"), 0o444)
	if err := s.VerifyLayout(b.ID, dst); !errors.Is(err, ErrLayoutMismatch) {
		t.Errorf("extra file: got %v, want ErrLayoutMismatch", err)
	}
}

func TestLayoutBundleCannotProduce(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root, 0)
	b, err := s.AddBundle(bundleTree(t), BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var unknown BundleID
	unknown[0] = 1
	if err := s.LayoutBundle(unknown, filepath.Join(t.TempDir(), "w")); !errors.Is(err, ErrNoBundle) {
		t.Errorf("unknown bundle: got %v, want ErrNoBundle", err)
	}
	// Damage one chunk on disk: the layout fails, leaves nothing, and says
	// why.
	var big File
	for _, f := range b.Manifest.Files {
		if f.Path == "data/input.bin" {
			big = f
		}
	}
	p := s.chunkPath(big.Chunks[len(big.Chunks)-1].Hash)
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, bytes.Repeat([]byte{1}, int(big.Chunks[len(big.Chunks)-1].Size)), 0o444); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dst := filepath.Join(parent, "w")
	err = s.LayoutBundle(b.ID, dst)
	if !errors.Is(err, ErrNoBundle) || !errors.Is(err, ErrCorruptChunk) {
		t.Fatalf("corrupt chunk: got %v, want ErrNoBundle and ErrCorruptChunk", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Errorf("a failed layout left %v", ents)
	}
	// The corrupt chunk was removed: the store now says it cannot.
	if err := s.HasBundle(b.ID); !errors.Is(err, ErrNoBundle) {
		t.Errorf("HasBundle after losing a chunk: got %v, want ErrNoBundle", err)
	}
}

func TestMissingBytes(t *testing.T) {
	a := openStore(t, t.TempDir(), 0)
	dst := openStore(t, t.TempDir(), 0)
	dir := bundleTree(t)
	b, err := a.AddBundle(dir, BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	for _, c := range b.Manifest.Chunks() {
		all += c.Size
	}
	if got := dst.MissingBytes(b.Manifest); got != all || all != b.Stored {
		t.Errorf("empty destination lacks %d bytes, want all %d (stored %d)", got, all, b.Stored)
	}
	// The destination holds the data file already (another bundle with it).
	other := t.TempDir()
	data, _ := os.ReadFile(filepath.Join(dir, "data/input.bin"))
	writeTree(t, other, map[string][]byte{"copy.bin": data})
	if _, err := dst.AddBundle(other, BundleOptions{}); err != nil {
		t.Fatal(err)
	}
	want := all - int64(len(data))
	if got := dst.MissingBytes(b.Manifest); got != want {
		t.Errorf("destination with the data file lacks %d bytes, want %d", got, want)
	}
	if got := b.Manifest.MissingBytes(a.Has); got != 0 {
		t.Errorf("the source lacks %d bytes of its own bundle", got)
	}
}
