package pki

import (
	"crypto/hpke"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// MaxSecretSize bounds one secret value (an environment variable).
const MaxSecretSize = 64 << 10

// secretsKeyPEM is the PEM type of a stored secrets key.
const secretsKeyPEM = "RECLAIMNET SECRETS KEY"

// SecretsKey is the cluster's key for job secrets (`run --secret-env`).
// The submitting node seals a value to its public half; the sealed bytes
// are what the replicated log and every disk hold. Only voters hold the
// private half (see [VoterKeys]): when a job starts on a host, a voter that
// has checked in the replicated state that the host runs the job opens the
// value and reseals it to the host's certificate ([SecretsKey.ResealSecret]),
// and the host opens it ([Bundle.OpenJobSecret]) into the job's environment
// only. The KEM is X-Wing (ML-KEM-768 with X25519) because sealed values
// outlive the job in the log and in snapshots: whoever copies them today
// should not open them with a quantum computer later.
type SecretsKey struct {
	priv hpke.PrivateKey
}

// NewSecretsKey makes a fresh secrets key (at bootstrap).
func NewSecretsKey() (*SecretsKey, error) {
	k, err := hpke.MLKEM768X25519().GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("pki: generate secrets key: %w", err)
	}
	return &SecretsKey{priv: k}, nil
}

// PublicKey returns the public half every node seals to; it is no secret
// and travels in the replicated state.
func (k *SecretsKey) PublicKey() []byte { return k.priv.PublicKey().Bytes() }

// MarshalPEM encodes the private key for [SecretsKeyFile].
func (k *SecretsKey) MarshalPEM() ([]byte, error) {
	b, err := k.priv.Bytes()
	if err != nil {
		return nil, fmt.Errorf("pki: marshal secrets key: %w", err)
	}
	return pemBlock(secretsKeyPEM, b), nil
}

// ParseSecretsKeyPEM decodes what [SecretsKey.MarshalPEM] encoded.
func ParseSecretsKeyPEM(b []byte) (*SecretsKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != secretsKeyPEM {
		return nil, fmt.Errorf("%w: no PEM %s block", ErrCorrupt, secretsKeyPEM)
	}
	return parseSecretsKey(blk.Bytes)
}

func parseSecretsKey(raw []byte) (*SecretsKey, error) {
	k, err := hpke.MLKEM768X25519().NewPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: secrets key: %v", ErrCorrupt, err)
	}
	return &SecretsKey{priv: k}, nil
}

// SealSecret encrypts value, the job's secret environment variable name,
// to the cluster secrets key whose public half is clusterPub. The job ID and
// the name are bound in, so the sealed bytes open for that variable of that
// job only: copied into another job's record they are useless.
func SealSecret(clusterPub []byte, job, name string, value []byte) ([]byte, error) {
	if err := checkSecret(job, name, value); err != nil {
		return nil, err
	}
	pk, err := hpke.MLKEM768X25519().NewPublicKey(clusterPub)
	if err != nil {
		return nil, fmt.Errorf("pki: secrets public key: %w", err)
	}
	ct, err := hpke.Seal(pk, hpke.HKDFSHA256(), hpke.AES256GCM(), secretInfo(job, name), value)
	if err != nil {
		return nil, fmt.Errorf("pki: seal secret %s: %w", name, err)
	}
	return append([]byte{sealVersion}, ct...), nil
}

// OpenSecret decrypts what [SealSecret] sealed for job and name.
func (k *SecretsKey) OpenSecret(job, name string, sealed []byte) ([]byte, error) {
	if len(sealed) < 1 || sealed[0] != sealVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrSealed)
	}
	v, err := hpke.Open(k.priv, hpke.HKDFSHA256(), hpke.AES256GCM(), secretInfo(job, name), sealed[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: secret %s of job %s: %v", ErrSealed, name, job, err)
	}
	return v, nil
}

// ResealSecret opens a sealed job secret and seals it to the job's host, so
// the value crosses the network (and any node that relays it) encrypted to
// the one machine that runs the job. The caller must have checked that host
// runs job.
func (k *SecretsKey) ResealSecret(job, name string, sealed []byte, host *x509.Certificate) ([]byte, error) {
	v, err := k.OpenSecret(job, name, sealed)
	if err != nil {
		return nil, err
	}
	return SealForNode(host, string(hpkeInfo("secret-env", job, name)), v)
}

// OpenJobSecret decrypts a secret that [SecretsKey.ResealSecret] sealed to
// this node for job and name.
func (b *Bundle) OpenJobSecret(job, name string, sealed []byte) ([]byte, error) {
	return b.OpenSealed(string(hpkeInfo("secret-env", job, name)), sealed)
}

func secretInfo(job, name string) []byte {
	return hpkeInfo("reclaimnet/secret-env/v1", job, name)
}

// checkSecret refuses what a process environment cannot carry: an empty
// job ID, a name that is not an environment variable name, a value with a
// NUL byte or over MaxSecretSize.
func checkSecret(job, name string, value []byte) error {
	if job == "" {
		return errors.New("pki: secret for an empty job ID")
	}
	if err := ValidEnvName(name); err != nil {
		return err
	}
	if len(value) > MaxSecretSize {
		return fmt.Errorf("pki: secret %s is %d bytes, more than %d", name, len(value), MaxSecretSize)
	}
	for _, c := range value {
		if c == 0 {
			return fmt.Errorf("pki: secret %s contains a NUL byte, which an environment cannot hold", name)
		}
	}
	return nil
}

// ValidEnvName checks that name is a portable environment variable name:
// a letter or '_', then letters, digits or '_'.
func ValidEnvName(name string) error {
	if name == "" {
		return errors.New("pki: empty environment variable name")
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("pki: %q is not an environment variable name (want a letter or '_', then letters, digits or '_')", name)
		}
	}
	return nil
}
