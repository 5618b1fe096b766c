package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hpke"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SecretsKeyFile holds the cluster secrets key on a voter (mode 0600).
const SecretsKeyFile = "secrets-key.pem"

// ErrSealed: sealed bytes that cannot be opened: not sealed to this key,
// for another purpose or recipient, or altered.
var ErrSealed = errors.New("pki: cannot open sealed data")

// sealVersion is the first byte of everything sealed here, so the format
// can change without guessing.
const sealVersion byte = 1

// SealForNode encrypts plaintext to the node whose certificate is cert, so
// only the holder of that certificate's private key can read it, for the
// named purpose. HPKE (RFC 9180) base mode with DHKEM(P-256), HKDF-SHA256
// and AES-256-GCM on the certificate's own ECDSA P-256 key; the purpose and
// the node name are bound into the HPKE info, so bytes sealed for one use
// or one node open for no other.
func SealForNode(cert *x509.Certificate, purpose string, plaintext []byte) ([]byte, error) {
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("pki: seal for %q: certificate key is not ECDSA P-256", cert.Subject.CommonName)
	}
	epub, err := pub.ECDH()
	if err != nil {
		return nil, fmt.Errorf("pki: seal for %q: %w", cert.Subject.CommonName, err)
	}
	pk, err := hpke.NewDHKEMPublicKey(epub)
	if err != nil {
		return nil, fmt.Errorf("pki: seal for %q: %w", cert.Subject.CommonName, err)
	}
	ct, err := hpke.Seal(pk, hpke.HKDFSHA256(), hpke.AES256GCM(), nodeInfo(purpose, cert.Subject.CommonName), plaintext)
	if err != nil {
		return nil, fmt.Errorf("pki: seal for %q: %w", cert.Subject.CommonName, err)
	}
	return append([]byte{sealVersion}, ct...), nil
}

// OpenSealed decrypts what [SealForNode] sealed to this bundle's
// certificate for purpose.
func (b *Bundle) OpenSealed(purpose string, sealed []byte) ([]byte, error) {
	if len(sealed) < 1 || sealed[0] != sealVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrSealed)
	}
	key, ok := b.Cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: node key is not ECDSA", ErrSealed)
	}
	ekey, err := key.ECDH()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	sk, err := hpke.NewDHKEMPrivateKey(ekey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	pt, err := hpke.Open(sk, hpke.HKDFSHA256(), hpke.AES256GCM(), nodeInfo(purpose, b.Node), sealed[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	return pt, nil
}

func nodeInfo(purpose, node string) []byte {
	return hpkeInfo("reclaimnet/seal/v1", purpose, node)
}

// hpkeInfo joins a label and parts, each length-prefixed, so no two
// different lists of parts give the same info.
func hpkeInfo(label string, parts ...string) []byte {
	out := []byte(label)
	for _, p := range parts {
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}

// VoterKeys are the keys only Raft voters hold, so whichever node leads has
// them: the CA's signing key (absent where a campus runs its own PKI and
// signs certificates elsewhere) and the cluster secrets key.
type VoterKeys struct {
	CA      *CA
	Secrets *SecretsKey
}

// voterKeysPurpose is the HPKE purpose of sealed voter keys.
const voterKeysPurpose = "voter-keys"

type voterKeysWire struct {
	CAKey   []byte `json:"ca_key,omitempty"` // PKCS#8 DER
	Secrets []byte `json:"secrets"`          // the secrets key's private bytes
}

// SealFor seals the keys to a newly promoted voter's certificate, for
// transfer over mutual TLS; only that voter can open them.
func (v *VoterKeys) SealFor(voter *x509.Certificate) ([]byte, error) {
	var w voterKeysWire
	if v.CA != nil {
		der, err := x509.MarshalPKCS8PrivateKey(v.CA.Key)
		if err != nil {
			return nil, fmt.Errorf("pki: marshal CA key: %w", err)
		}
		w.CAKey = der
	}
	if v.Secrets == nil {
		return nil, errors.New("pki: voter keys without a secrets key")
	}
	sb, err := v.Secrets.priv.Bytes()
	if err != nil {
		return nil, fmt.Errorf("pki: marshal secrets key: %w", err)
	}
	w.Secrets = sb
	pt, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	return SealForNode(voter, voterKeysPurpose, pt)
}

// OpenVoterKeys opens voter keys sealed to b's certificate and checks that
// the CA key, if any, belongs to b's cluster CA.
func (b *Bundle) OpenVoterKeys(sealed []byte) (*VoterKeys, error) {
	pt, err := b.OpenSealed(voterKeysPurpose, sealed)
	if err != nil {
		return nil, err
	}
	var w voterKeysWire
	if err := json.Unmarshal(pt, &w); err != nil {
		return nil, fmt.Errorf("%w: voter keys: %v", ErrSealed, err)
	}
	v := &VoterKeys{}
	if v.Secrets, err = parseSecretsKey(w.Secrets); err != nil {
		return nil, err
	}
	if len(w.CAKey) > 0 {
		k, err := x509.ParsePKCS8PrivateKey(w.CAKey)
		if err != nil {
			return nil, fmt.Errorf("%w: CA key: %v", ErrSealed, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok || !ek.PublicKey.Equal(b.CA.PublicKey) {
			return nil, fmt.Errorf("CA key: %w", ErrKeyMismatch)
		}
		v.CA = &CA{Cert: b.CA, CertPEM: pemBlock("CERTIFICATE", b.CA.Raw), Key: ek}
	}
	return v, nil
}

// Write stores the keys in dir: ca-key.pem (with ca.pem) when there is a CA
// key, and secrets-key.pem, each 0600.
func (v *VoterKeys) Write(dir string) error {
	if v.CA != nil {
		if err := v.CA.Write(dir); err != nil {
			return err
		}
	}
	pemBytes, err := v.Secrets.MarshalPEM()
	if err != nil {
		return err
	}
	return WriteSecretFile(filepath.Join(dir, SecretsKeyFile), pemBytes)
}

// LoadVoterKeys reads what [VoterKeys.Write] wrote; a missing ca-key.pem
// leaves CA nil.
func LoadVoterKeys(dir string) (*VoterKeys, error) {
	b, err := ReadSecretFile(filepath.Join(dir, SecretsKeyFile))
	if err != nil {
		return nil, err
	}
	s, err := ParseSecretsKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, SecretsKeyFile), err)
	}
	v := &VoterKeys{Secrets: s}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); errors.Is(err, os.ErrNotExist) {
		return v, nil
	}
	if v.CA, err = LoadCA(dir); err != nil {
		return nil, err
	}
	return v, nil
}
