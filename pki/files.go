package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// ErrInsecureFile: a key file that other users can read or write, a
// certificate file that they can write, or a file another user owns.
var ErrInsecureFile = errors.New("pki: file is open to other users")

// maxFileSize bounds what is read from a key or certificate file: the
// largest of them (a CA certificate) is under 2 KiB.
const maxFileSize = 1 << 20

// ReadSecretFile reads a secret (a private key, the gossip key) and refuses
// it when anyone but its owner may read or write it, or when it belongs to
// another user than this process's or root; the error gives the command that
// fixes it.
func ReadSecretFile(path string) ([]byte, error) {
	return readChecked(path, true)
}

// WriteSecretFile replaces path with data, mode 0600, atomically (a crash
// leaves the old file or the new one, never half of one).
func WriteSecretFile(path string, data []byte) error {
	return writeFileAtomic(path, data, 0o600, true)
}

// CreateSecretFile writes data to a new file path, mode 0600, and fails
// with an error wrapping os.ErrExist if path already exists, so a key is
// never silently replaced.
func CreateSecretFile(path string, data []byte) error {
	return writeFileAtomic(path, data, 0o600, false)
}

// readChecked opens path, checks the open file's mode and owner, and reads
// it. A secret must be private to its owner; a certificate (public) must not
// be writable by others, because whoever can replace ca.pem chooses whom
// the node trusts.
func readChecked(path string, secret bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, ErrMissing)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := checkMode(path, fi, secret); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, ErrCorrupt, maxFileSize)
	}
	return b, nil
}

func checkMode(path string, fi os.FileInfo, secret bool) error {
	perm := fi.Mode().Perm()
	mask, want, what := os.FileMode(0o022), "644", "writable by other users"
	if secret {
		mask, want, what = 0o077, "600", "open to other users"
	}
	if perm&mask != 0 {
		return fmt.Errorf("%w: %s is %s (mode %04o): run 'chmod %s %s'", ErrInsecureFile, path, what, perm, want, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if euid := os.Geteuid(); st.Uid != uint32(euid) && st.Uid != 0 {
		return fmt.Errorf("%w: %s belongs to uid %d, who can change it: run 'chown %d %s'", ErrInsecureFile, path, st.Uid, euid, path)
	}
	return nil
}

func readCert(path string) ([]byte, *x509.Certificate, error) {
	b, err := readChecked(path, false)
	if err != nil {
		return nil, nil, err
	}
	c, err := parseCertPEM(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, c, nil
}

func readKey(path string) ([]byte, *ecdsa.PrivateKey, error) {
	b, err := readChecked(path, true)
	if err != nil {
		return nil, nil, err
	}
	k, err := parseKeyPEM(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, k, nil
}

// writeFileAtomic writes via a temp file (created with perm, so the data is
// never readable by others even for a moment), fsync, then rename (replace)
// or link (exclusive), so a crash never leaves a half-written key.
func writeFileAtomic(path string, data []byte, perm os.FileMode, replace bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a rename it is gone; after a link it is the spare name
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	publish := os.Rename
	if !replace {
		publish = os.Link
	}
	if err := publish(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
