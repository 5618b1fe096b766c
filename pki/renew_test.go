package pki

import (
	"crypto/x509"
	"testing"
	"time"
)

// RenewAt is two thirds into a certificate's life, RenewDue flips there and
// nowhere else (checked minute by minute), and a node whose every attempt
// fails still retries often before expiry, never more than MaxRenewRetry
// apart, never faster than MinRenewRetry.
func TestRenewalTiming(t *testing.T) {
	start := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, life := range []time.Duration{time.Hour, 24 * time.Hour, 90 * 24 * time.Hour} {
		cert := &x509.Certificate{NotBefore: start, NotAfter: start.Add(life)}
		at := RenewAt(cert)
		if d := at.Sub(start) - life*2/3; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("life %v: RenewAt is %v after NotBefore, want %v", life, at.Sub(start), life*2/3)
		}
		step := life / 1000
		for now := start; now.Before(cert.NotAfter); now = now.Add(step) {
			if got, want := RenewDue(cert, now), !now.Before(at); got != want {
				t.Fatalf("life %v, at +%v: RenewDue %v, want %v", life, now.Sub(start), got, want)
			}
			if !RenewDue(cert, now) && !NextRenewal(cert, now).Equal(at) {
				t.Fatalf("life %v, at +%v: NextRenewal %v before due, want RenewAt %v", life, now.Sub(start), NextRenewal(cert, now), at)
			}
		}

		// Every attempt fails: walk NextRenewal from the due time to expiry.
		attempts, now := 0, at
		for now.Before(cert.NotAfter) {
			next := NextRenewal(cert, now)
			gap := next.Sub(now)
			if gap < MinRenewRetry || gap > MaxRenewRetry {
				t.Fatalf("life %v, at +%v: retry in %v, want within [%v, %v]", life, now.Sub(start), gap, MinRenewRetry, MaxRenewRetry)
			}
			now, attempts = next, attempts+1
		}
		// A third of the life is left when renewal starts; at one attempt
		// per MaxRenewRetry at worst, that is at least this many attempts.
		if want := int(life / 3 / MaxRenewRetry); attempts < want {
			t.Errorf("life %v: %d attempts before expiry, want at least %d", life, attempts, want)
		}
	}
}
