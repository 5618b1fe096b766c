package enroll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const testFP = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestTokenRoundTripAndRedaction(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	tok, rec, err := NewToken(testFP, DefaultTokenTTL, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	s := tok.Encode()
	if !strings.HasPrefix(s, "rn1.") || strings.ContainsAny(s, " \n") {
		t.Errorf("Encode: %q is not one printable word starting rn1.", s)
	}
	back, err := ParseToken("  " + s + "\n")
	if err != nil || back != tok {
		t.Fatalf("ParseToken(Encode()): got %v, %v; want %v", back, err, tok)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, tok); strings.Contains(out, tok.Secret) {
			t.Errorf("%s prints the secret: %s", f, out)
		}
		if out := fmt.Sprintf(f, []Token{tok}); strings.Contains(out, tok.Secret) {
			t.Errorf("%s of a slice prints the secret: %s", f, out)
		}
	}
	if rec.ID != tok.ID || rec.CA != testFP || !rec.Expires.Equal(now.Add(DefaultTokenTTL)) || rec.MaxUses != 3 {
		t.Errorf("record: got %+v", rec)
	}
	if strings.Contains(fmt.Sprintf("%+v", rec), tok.Secret) {
		t.Error("the record holds the secret")
	}
	if string(rec.SecretHash) != string(tok.SecretHash()) {
		t.Error("the record's hash is not the token's")
	}
	// Two tokens never share an ID or a secret.
	tok2, _, err := NewToken(testFP, time.Hour, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if tok2.ID == tok.ID || tok2.Secret == tok.Secret {
		t.Error("two tokens share an ID or a secret")
	}
	// The hash depends on the ID as well as the secret.
	swapped := Token{ID: tok2.ID, Secret: tok.Secret, CA: testFP}
	if string(swapped.SecretHash()) == string(tok.SecretHash()) {
		t.Error("the hash does not bind the ID")
	}
}

func TestParseTokenRefusesMalformed(t *testing.T) {
	good, _, err := NewToken(testFP, time.Hour, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := good.Encode()
	for name, bad := range map[string]string{
		"empty":          "",
		"other prefix":   "rn2" + s[3:],
		"missing part":   s[:strings.LastIndex(s, ".")],
		"extra part":     s + ".00",
		"truncated":      s[:len(s)-1],
		"upper case":     strings.ToUpper(s[:4]) + strings.ToUpper(s[4:]),
		"not hex":        strings.Replace(s, s[4:5], "g", 1),
		"space inside":   s[:10] + " " + s[11:],
		"short secret":   "rn1." + good.ID + ".00." + good.CA,
		"kubeadm format": "abcdef.0123456789abcdef",
	} {
		if _, err := ParseToken(bad); !errors.Is(err, ErrWrongToken) {
			t.Errorf("%s (%q): got %v, want ErrWrongToken", name, bad, err)
		}
	}
}

func TestNewTokenRefusesBadArguments(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		ca   string
		ttl  time.Duration
		uses int
	}{
		{testFP, 0, 0},
		{testFP, -time.Hour, 0},
		{testFP, MaxTokenTTL + time.Second, 0},
		{testFP, time.Hour, -1},
		{"abc", time.Hour, 0},
		{strings.ToUpper(testFP), time.Hour, 0},
	} {
		if _, _, err := NewToken(c.ca, c.ttl, c.uses, now); err == nil {
			t.Errorf("NewToken(%q, %v, %d): got nil error", c.ca, c.ttl, c.uses)
		}
	}
	if _, _, err := NewToken(testFP, MaxTokenTTL, 0, now); err != nil {
		t.Errorf("NewToken at MaxTokenTTL: %v", err)
	}
}

func TestRecordState(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	base := Record{Created: now.Add(-time.Hour), Expires: now.Add(time.Hour), MaxUses: 2, Used: 1}
	for _, c := range []struct {
		name string
		edit func(*Record)
		at   time.Time
		want State
	}{
		{"active", func(*Record) {}, now, Active},
		{"unlimited uses", func(r *Record) { r.MaxUses, r.Used = 0, 100 }, now, Active},
		{"used up", func(r *Record) { r.Used = 2 }, now, UsedUp},
		{"expired at the instant", func(*Record) {}, now.Add(time.Hour), Expired},
		{"expired and used up", func(r *Record) { r.Used = 2 }, now.Add(2 * time.Hour), Expired},
		{"revoked beats all", func(r *Record) { r.Used, r.Revoked = 2, now }, now.Add(2 * time.Hour), Revoked},
	} {
		r := base
		c.edit(&r)
		if got := r.State(c.at); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
