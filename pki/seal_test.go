package pki

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSealForNode(t *testing.T) {
	ca := mustCA(t, "lab")
	nc, err := ca.Issue("node-a", nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, err := nc.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b := mustBundle(t, ca, "node-b")
	// node-a's key under another name: the name is bound in, so this does
	// not open what was sealed to node-a either.
	key, err := parseKeyPEM(nc.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, renamedPEM, err := ca.IssueFor(&key.PublicKey, "node-c", nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	renamed, err := NewBundle(ca.CertPEM, renamedPEM, nc.KeyPEM, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	msg := []byte("only node-a reads this")
	sealed, err := SealForNode(a.Leaf, "test", msg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, msg) {
		t.Fatal("the plaintext is in the sealed bytes")
	}
	got, err := a.OpenSealed("test", sealed)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("open by the recipient: got %q, %v", got, err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"another node":         func() ([]byte, error) { return b.OpenSealed("test", sealed) },
		"same key, other name": func() ([]byte, error) { return renamed.OpenSealed("test", sealed) },
		"another purpose":      func() ([]byte, error) { return a.OpenSealed("other", sealed) },
		"altered":              func() ([]byte, error) { return a.OpenSealed("test", tampered) },
		"unknown version":      func() ([]byte, error) { return a.OpenSealed("test", append([]byte{9}, sealed[1:]...)) },
		"empty":                func() ([]byte, error) { return a.OpenSealed("test", nil) },
	} {
		if got, err := open(); !errors.Is(err, ErrSealed) || got != nil {
			t.Errorf("%s: got %q, %v; want ErrSealed", name, got, err)
		}
	}
}

func TestVoterKeys(t *testing.T) {
	ca, other := mustCA(t, "lab"), mustCA(t, "other")
	voter, bystander := mustBundle(t, ca, "voter"), mustBundle(t, ca, "bystander")
	secrets, err := NewSecretsKey()
	if err != nil {
		t.Fatal(err)
	}
	keys := &VoterKeys{CA: ca, Secrets: secrets}
	sealed, err := keys.SealFor(voter.Leaf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := voter.OpenVoterKeys(sealed)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CA.Key.Equal(ca.Key) || !got.CA.Cert.Equal(ca.Cert) {
		t.Error("the opened CA key is not the cluster's")
	}
	// The opened secrets key opens what was sealed to the original.
	box, err := SealSecret(secrets.PublicKey(), "job-1", "API_KEY", []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := got.Secrets.OpenSecret("job-1", "API_KEY", box); err != nil || string(v) != "s3cret" {
		t.Errorf("opened secrets key: got %q, %v", v, err)
	}
	if _, err := bystander.OpenVoterKeys(sealed); !errors.Is(err, ErrSealed) {
		t.Errorf("another node opening voter keys: got %v, want ErrSealed", err)
	}
	// Keys of another CA sealed to a node of this one are refused on open.
	wrong, err := (&VoterKeys{CA: other, Secrets: secrets}).SealFor(voter.Leaf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := voter.OpenVoterKeys(wrong); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("another CA's key: got %v, want ErrKeyMismatch", err)
	}
	// A campus with its own PKI has no CA key to hand on.
	noCA, err := (&VoterKeys{Secrets: secrets}).SealFor(voter.Leaf)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := voter.OpenVoterKeys(noCA); err != nil || v.CA != nil {
		t.Errorf("voter keys without a CA key: got %+v, %v", v, err)
	}

	dir := t.TempDir()
	if err := got.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAKeyFile, SecretsKeyFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, fi.Mode().Perm())
		}
	}
	loaded, err := LoadVoterKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.CA.Key.Equal(ca.Key) || !bytes.Equal(loaded.Secrets.PublicKey(), secrets.PublicKey()) {
		t.Error("LoadVoterKeys returned other keys than were written")
	}
	os.Chmod(filepath.Join(dir, SecretsKeyFile), 0o644)
	if _, err := LoadVoterKeys(dir); !errors.Is(err, ErrInsecureFile) {
		t.Errorf("secrets key readable by others: got %v, want ErrInsecureFile", err)
	}
}

func TestJobSecrets(t *testing.T) {
	ca := mustCA(t, "lab")
	host, bystander := mustBundle(t, ca, "host"), mustBundle(t, ca, "bystander")
	k, err := NewSecretsKey()
	if err != nil {
		t.Fatal(err)
	}
	value := []byte("hf_abcdefghijklmnopqrstuvwxyz0123456789")
	sealed, err := SealSecret(k.PublicKey(), "job-7", "HF_TOKEN", value)
	if err != nil {
		t.Fatal(err)
	}
	// What the replicated log holds: nothing of the value.
	if bytes.Contains(sealed, value) || bytes.Contains(sealed, value[:8]) {
		t.Fatal("the sealed secret contains the value")
	}
	for name, open := range map[string]func() ([]byte, error){
		"another job":  func() ([]byte, error) { return k.OpenSecret("job-8", "HF_TOKEN", sealed) },
		"another name": func() ([]byte, error) { return k.OpenSecret("job-7", "OTHER", sealed) },
	} {
		if _, err := open(); !errors.Is(err, ErrSealed) {
			t.Errorf("%s: got %v, want ErrSealed", name, err)
		}
	}
	other, _ := NewSecretsKey()
	if _, err := other.OpenSecret("job-7", "HF_TOKEN", sealed); !errors.Is(err, ErrSealed) {
		t.Errorf("another cluster's secrets key: got %v, want ErrSealed", err)
	}

	// A voter reseals to the job's host; only that host opens it.
	forHost, err := k.ResealSecret("job-7", "HF_TOKEN", sealed, host.Leaf)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(forHost, value) {
		t.Fatal("the resealed secret contains the value")
	}
	if v, err := host.OpenJobSecret("job-7", "HF_TOKEN", forHost); err != nil || !bytes.Equal(v, value) {
		t.Errorf("host opens: got %q, %v", v, err)
	}
	if _, err := bystander.OpenJobSecret("job-7", "HF_TOKEN", forHost); !errors.Is(err, ErrSealed) {
		t.Errorf("another node opens the host's copy: got %v, want ErrSealed", err)
	}
	if _, err := host.OpenJobSecret("job-8", "HF_TOKEN", forHost); !errors.Is(err, ErrSealed) {
		t.Errorf("host opens it for another job: got %v, want ErrSealed", err)
	}

	pemBytes, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ParseSecretsKeyPEM(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := k2.OpenSecret("job-7", "HF_TOKEN", sealed); err != nil || !bytes.Equal(v, value) {
		t.Errorf("secrets key after a PEM round trip: got %q, %v", v, err)
	}
	if _, err := ParseSecretsKeyPEM(ca.CertPEM); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a certificate as secrets key: got %v, want ErrCorrupt", err)
	}
}

func TestSealSecretRefusesWhatAnEnvironmentCannotHold(t *testing.T) {
	k, err := NewSecretsKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		job, name string
		value     []byte
		want      string
	}{
		{"", "KEY", []byte("v"), "empty job"},
		{"j", "", []byte("v"), "empty environment variable name"},
		{"j", "1KEY", []byte("v"), "not an environment variable name"},
		{"j", "A-B", []byte("v"), "not an environment variable name"},
		{"j", "A=B", []byte("v"), "not an environment variable name"},
		{"j", "KEY", []byte("a\x00b"), "NUL"},
		{"j", "KEY", make([]byte, MaxSecretSize+1), "more than"},
	} {
		if _, err := SealSecret(k.PublicKey(), c.job, c.name, c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SealSecret(%q, %q): got %v, want an error with %q", c.job, c.name, err, c.want)
		}
	}
	for _, ok := range []string{"KEY", "_k", "HF_TOKEN_2"} {
		if _, err := SealSecret(k.PublicKey(), "j", ok, []byte("v")); err != nil {
			t.Errorf("SealSecret name %q: %v", ok, err)
		}
	}
	if _, err := SealSecret([]byte("short"), "j", "KEY", []byte("v")); err == nil {
		t.Error("SealSecret to a malformed public key: got nil error")
	}
}
