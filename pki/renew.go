package pki

import (
	"crypto/x509"
	"time"
)

// Renewal timing. A certificate renews two thirds into its validity: a
// 90-day certificate at day 60, which leaves 30 days of retries (a lab
// machine switched off over a break, a leader election) before it expires.
const (
	renewNum, renewDen = 2, 3
	// MinRenewRetry and MaxRenewRetry bound the wait between failed
	// renewal attempts.
	MinRenewRetry = time.Minute
	MaxRenewRetry = time.Hour
)

// RenewAt returns when cert is due for renewal:
// NotBefore + ⅔·(NotAfter − NotBefore).
func RenewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life / renewDen * renewNum)
}

// RenewDue reports whether cert is due for renewal at now.
func RenewDue(cert *x509.Certificate, now time.Time) bool {
	return !now.Before(RenewAt(cert))
}

// NextRenewal returns when to try renewing cert next, seen at now: RenewAt
// while that is ahead; once due, now plus a sixteenth of the time left
// before expiry, clamped to [MinRenewRetry, MaxRenewRetry], so retries
// grow denser as expiry nears without flooding the leader.
func NextRenewal(cert *x509.Certificate, now time.Time) time.Time {
	if at := RenewAt(cert); now.Before(at) {
		return at
	}
	retry := min(max(cert.NotAfter.Sub(now)/16, MinRenewRetry), MaxRenewRetry)
	return now.Add(retry)
}
