package enroll

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Token lifetimes.
const (
	// DefaultTokenTTL is how long a token is valid unless told otherwise:
	// a day, enough to walk round a lab.
	DefaultTokenTTL = 24 * time.Hour
	// MaxTokenTTL caps a token's life at a term, so no join token is
	// forever.
	MaxTokenTTL = 90 * 24 * time.Hour
)

// Token encoding: "rn1.<id>.<secret>.<ca>", lowercase hex.
const (
	tokenPrefix = "rn1"
	idBytes     = 8  // 16 hex digits, shown by 'token list'
	secretBytes = 16 // 128 bits: guessing is hopeless, so a fast hash suffices
	caHexLen    = 2 * sha256.Size
)

// Token is a join token: an ID, a secret, and the fingerprint of the
// cluster's CA, which identifies the cluster and lets a joiner pin it
// before it sends the secret anywhere. Printed with [Token.Encode]; its
// String and GoString hide the secret, so a token in a log line leaks
// nothing.
type Token struct {
	ID     string
	Secret string
	CA     string // pki.Fingerprint of the cluster CA
}

// Encode returns the printable token, "rn1.<id>.<secret>.<ca>".
func (t Token) Encode() string {
	return strings.Join([]string{tokenPrefix, t.ID, t.Secret, t.CA}, ".")
}

// String returns the token with its secret hidden.
func (t Token) String() string {
	return strings.Join([]string{tokenPrefix, t.ID, "<secret>", t.CA}, ".")
}

// GoString hides the secret from %#v too.
func (t Token) GoString() string { return "enroll.Token(" + t.String() + ")" }

// SecretHash is what the replicated state stores instead of the secret:
// SHA-256 over a label, the ID and the secret. The secret has 128 random
// bits, so a plain hash cannot be inverted by trying secrets.
func (t Token) SecretHash() []byte {
	return secretHash(t.ID, t.Secret)
}

func secretHash(id, secret string) []byte {
	sum := sha256.Sum256([]byte("reclaimnet join token v1\x00" + id + "\x00" + secret))
	return sum[:]
}

// ParseToken reads a printed token (surrounding space ignored). Anything
// that is not one is refused with an error wrapping ErrWrongToken that says
// what is wrong with it.
func ParseToken(s string) (Token, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) != 4 || parts[0] != tokenPrefix {
		return Token{}, fmt.Errorf("%w: not a join token (want %s.<id>.<secret>.<ca>, as 'reclaimnet token create' prints)", ErrWrongToken, tokenPrefix)
	}
	t := Token{ID: parts[1], Secret: parts[2], CA: parts[3]}
	for _, f := range []struct {
		name, v string
		n       int
	}{{"ID", t.ID, 2 * idBytes}, {"secret", t.Secret, 2 * secretBytes}, {"CA fingerprint", t.CA, caHexLen}} {
		if len(f.v) != f.n || !isLowerHex(f.v) {
			return Token{}, fmt.Errorf("%w: its %s is not %d hex digits (was the token copied whole?)", ErrWrongToken, f.name, f.n)
		}
	}
	return t, nil
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewToken makes a token for the cluster whose CA fingerprint is ca, valid
// from now for ttl and for uses joins (0: any number until it expires), and
// the record the replicated state keeps of it. Only the record is stored;
// the token is printed once for the admin.
func NewToken(ca string, ttl time.Duration, uses int, now time.Time) (Token, Record, error) {
	if len(ca) != caHexLen || !isLowerHex(ca) {
		return Token{}, Record{}, fmt.Errorf("enroll: CA fingerprint %q is not %d hex digits", ca, caHexLen)
	}
	if ttl <= 0 || ttl > MaxTokenTTL {
		return Token{}, Record{}, fmt.Errorf("enroll: token lifetime %v must be above 0 and at most %v", ttl, MaxTokenTTL)
	}
	if uses < 0 {
		return Token{}, Record{}, fmt.Errorf("enroll: token uses %d must be 0 (until it expires) or more", uses)
	}
	b := make([]byte, idBytes+secretBytes)
	if _, err := rand.Read(b); err != nil {
		return Token{}, Record{}, fmt.Errorf("enroll: token randomness: %w", err)
	}
	t := Token{ID: hex.EncodeToString(b[:idBytes]), Secret: hex.EncodeToString(b[idBytes:]), CA: ca}
	r := Record{ID: t.ID, SecretHash: t.SecretHash(), CA: ca, Created: now, Expires: now.Add(ttl), MaxUses: uses}
	return t, r, nil
}

// Record is what the replicated state holds of a token: never the secret,
// only its hash.
type Record struct {
	ID         string    `json:"id"`
	SecretHash []byte    `json:"secret_hash"`
	CA         string    `json:"ca"`
	Created    time.Time `json:"created"`
	Expires    time.Time `json:"expires"`
	// MaxUses is how many nodes may join with the token; 0 is any number
	// until it expires.
	MaxUses int `json:"max_uses,omitempty"`
	Used    int `json:"used,omitempty"`
	// Revoked is when an admin revoked it; zero while it is not.
	Revoked time.Time `json:"revoked,omitzero"`
	// Nodes are the nodes that joined with it, in order.
	Nodes []string `json:"nodes,omitempty"`
}

// State is a token's standing, as 'token list' shows it.
type State string

// Token states.
const (
	Active  State = "active"
	Expired State = "expired"
	Revoked State = "revoked"
	UsedUp  State = "used up"
)

// State returns the record's standing at now; revoked comes first, then
// expired, then used up.
func (r Record) State(now time.Time) State {
	switch {
	case !r.Revoked.IsZero():
		return Revoked
	case !now.Before(r.Expires):
		return Expired
	case r.MaxUses > 0 && r.Used >= r.MaxUses:
		return UsedUp
	}
	return Active
}

// usable returns nil if the record admits one more join at now, otherwise
// an error wrapping the sentinel for its state that says what to do.
func (r Record) usable(now time.Time) error {
	const fix = "create a new one with 'reclaimnet token create'"
	switch r.State(now) {
	case Revoked:
		return fmt.Errorf("%w: token %s was revoked at %s; %s", ErrTokenRevoked, r.ID, stamp(r.Revoked), fix)
	case Expired:
		return fmt.Errorf("%w: token %s expired at %s; %s", ErrTokenExpired, r.ID, stamp(r.Expires), fix)
	case UsedUp:
		return fmt.Errorf("%w: token %s has no joins left (it allowed %d: %s); %s",
			ErrTokenUsedUp, r.ID, r.MaxUses, strings.Join(r.Nodes, ", "), fix)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// validate checks a record before the state accepts it.
func (r Record) validate() error {
	switch {
	case len(r.ID) != 2*idBytes || !isLowerHex(r.ID):
		return fmt.Errorf("enroll: token ID %q is not %d hex digits", r.ID, 2*idBytes)
	case len(r.SecretHash) != sha256.Size:
		return errors.New("enroll: token record without a secret hash")
	case len(r.CA) != caHexLen || !isLowerHex(r.CA):
		return fmt.Errorf("enroll: token %s: CA fingerprint %q is not %d hex digits", r.ID, r.CA, caHexLen)
	case !r.Expires.After(r.Created):
		return fmt.Errorf("enroll: token %s expires (%s) before it is created (%s)", r.ID, stamp(r.Expires), stamp(r.Created))
	case r.MaxUses < 0 || r.Used < 0:
		return fmt.Errorf("enroll: token %s: negative use count", r.ID)
	}
	return nil
}
