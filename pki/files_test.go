package pki

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSecretFileWrittenPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip.key")
	if err := WriteSecretFile(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecretFile(path, []byte("two")); err != nil {
		t.Fatalf("replace: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode: got %04o, want 0600", got)
	}
	b, err := ReadSecretFile(path)
	if err != nil || string(b) != "two" {
		t.Errorf("ReadSecretFile: got %q, %v; want \"two\", nil", b, err)
	}

	// CreateSecretFile never replaces a key.
	err = CreateSecretFile(path, []byte("three"))
	if !errors.Is(err, os.ErrExist) {
		t.Errorf("CreateSecretFile over an existing file: got %v, want os.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("after a refused create the file holds %q, want \"two\"", b)
	}
	fresh := filepath.Join(dir, "new.key")
	if err := CreateSecretFile(fresh, []byte("four")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o600 {
		t.Errorf("created mode: got %04o, want 0600", fi.Mode().Perm())
	}
	// No temporary file is left behind, after success or refusal.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only gossip.key and new.key", names)
	}
}

func TestSecretFileOpenToOthersRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip.key")
	if err := WriteSecretFile(path, []byte("k")); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := ReadSecretFile(path)
		if !errors.Is(err, ErrInsecureFile) || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Errorf("mode %04o: got %v, want ErrInsecureFile naming 'chmod 600 %s'", mode, err, path)
		}
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecretFile(path); err != nil {
		t.Errorf("mode 0400: got %v, want it read", err)
	}
	if _, err := ReadSecretFile(filepath.Join(dir, "absent")); !errors.Is(err, ErrMissing) {
		t.Errorf("missing file: got %v, want ErrMissing", err)
	}
}

// A file another user owns can be rewritten by that user whatever its mode.
func TestSecretFileOwnedByAnotherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to give a file to another user (CI=true)")
		}
		t.Skip("needs root to give a file to another user")
	}
	path := filepath.Join(t.TempDir(), "gossip.key")
	if err := WriteSecretFile(path, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSecretFile(path)
	if !errors.Is(err, ErrInsecureFile) || !strings.Contains(err.Error(), "chown 0 "+path) {
		t.Fatalf("got %v, want ErrInsecureFile naming 'chown 0 %s'", err, path)
	}
}

// The node and CA files: keys open to others and certificates others can
// write are refused at load, each with the command that fixes it.
func TestLoadRefusesFilesOpenToOthers(t *testing.T) {
	ca := mustCA(t, "lab")
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		if err := ca.Write(dir); err != nil {
			t.Fatal(err)
		}
		nc, err := ca.Issue("node-a", nil, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Write(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct {
		file string
		mode os.FileMode
		fix  string
		load func(string) error
	}{
		{NodeKeyFile, 0o644, "chmod 600", func(d string) error { _, err := LoadNode(d); return err }},
		{NodeKeyFile, 0o660, "chmod 600", func(d string) error { _, err := LoadNode(d); return err }},
		{CAKeyFile, 0o640, "chmod 600", func(d string) error { _, err := LoadCA(d); return err }},
		{CAFile, 0o666, "chmod 644", func(d string) error { _, err := LoadNode(d); return err }},
		{CAFile, 0o664, "chmod 644", func(d string) error { _, err := LoadCA(d); return err }},
		{NodeFile, 0o646, "chmod 644", func(d string) error { _, err := LoadNode(d); return err }},
	} {
		t.Run(c.file+" "+c.mode.String(), func(t *testing.T) {
			dir := setup(t)
			if err := c.load(dir); err != nil {
				t.Fatalf("before chmod: %v", err)
			}
			path := filepath.Join(dir, c.file)
			if err := os.Chmod(path, c.mode); err != nil {
				t.Fatal(err)
			}
			err := c.load(dir)
			if !errors.Is(err, ErrInsecureFile) || !strings.Contains(err.Error(), c.fix+" "+path) {
				t.Fatalf("got %v, want ErrInsecureFile naming '%s %s'", err, c.fix, path)
			}
		})
	}
}

func TestWrittenFileModes(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, "lab")
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	nc, err := ca.Issue("node-a", nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Write(dir); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, NodeFile: 0o644, NodeKeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", f, got, want)
		}
	}
}
