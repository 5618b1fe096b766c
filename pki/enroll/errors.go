package enroll

import (
	"errors"

	"github.com/reclaimnet/reclaimnet/pki"
)

// Errors callers can match with errors.Is, on the serving node (from the
// [Registry] and the [Handler]) and on the joining one (from [Client]: a
// refusal carries its code over the wire and unwraps to the same sentinel).
var (
	// ErrWrongToken: the token is not one this cluster made, or its secret
	// is wrong, or it is not a token at all.
	ErrWrongToken = errors.New("enroll: wrong join token")
	// ErrTokenExpired: the token's lifetime is over.
	ErrTokenExpired = errors.New("enroll: join token expired")
	// ErrTokenRevoked: an admin revoked the token.
	ErrTokenRevoked = errors.New("enroll: join token revoked")
	// ErrTokenUsedUp: the token has had all the joins it was made for.
	ErrTokenUsedUp = errors.New("enroll: join token used up")
	// ErrForeignCluster: the token names another cluster's CA.
	ErrForeignCluster = errors.New("enroll: join token is for another cluster")
	// ErrNameTaken: a member already has the node name.
	ErrNameTaken = errors.New("enroll: node name already taken")
	// ErrUnknownToken: no token has that ID (token revoke).
	ErrUnknownToken = errors.New("enroll: no such token")
	// ErrNotEnrolled: a renewal from a node that did not join by token, or
	// without a certificate.
	ErrNotEnrolled = errors.New("enroll: node not enrolled")
	// ErrNotVoter: voter keys asked for by a node that is not a voter.
	ErrNotVoter = errors.New("enroll: node is not a voter")
	// ErrNotHost: a job's secret asked for by a node that does not run
	// the job.
	ErrNotHost = errors.New("enroll: node does not run the job")
	// ErrPeerCA: the peer's certificate does not end in the CA the token
	// pins, so the joiner refused it before sending the token.
	ErrPeerCA = errors.New("enroll: peer is not in the cluster the token pins")
	// ErrBadRequest: a malformed request (frame, JSON, CSR).
	ErrBadRequest = errors.New("enroll: bad request")
	// ErrNotServed: the peer does not serve this kind of request.
	ErrNotServed = errors.New("enroll: request not served by this peer")
	// ErrInternal: the peer failed for a reason of its own (its log says
	// which).
	ErrInternal = errors.New("enroll: peer failed")
)

// wireCodes name each refusal on the wire; the joiner maps a code back to
// its sentinel. A code the joiner does not know reads as ErrInternal.
var wireCodes = []struct {
	code string
	err  error
}{
	{"wrong-token", ErrWrongToken},
	{"token-expired", ErrTokenExpired},
	{"token-revoked", ErrTokenRevoked},
	{"token-used-up", ErrTokenUsedUp},
	{"foreign-cluster", ErrForeignCluster},
	{"name-taken", ErrNameTaken},
	{"not-enrolled", ErrNotEnrolled},
	{"not-voter", ErrNotVoter},
	{"not-host", ErrNotHost},
	{"revoked", pki.ErrRevoked},
	{"bad-request", ErrBadRequest},
	{"not-served", ErrNotServed},
	{"internal", ErrInternal},
}

// codeOf returns the wire code of err, and false for an error that matches
// no sentinel (its text stays in the serving node's log).
func codeOf(err error) (string, bool) {
	for _, c := range wireCodes {
		if errors.Is(err, c.err) {
			return c.code, true
		}
	}
	return "internal", false
}

func errOfCode(code string) error {
	for _, c := range wireCodes {
		if c.code == code {
			return c.err
		}
	}
	return ErrInternal
}

// RefusedError is a peer's refusal as the joining or renewing node sees
// it: errors.Is matches the sentinel the peer named.
type RefusedError struct {
	Peer    string // the address dialed
	Op      string // join, renew, voter-keys
	Code    string
	Message string // the peer's explanation
	err     error
}

func (e *RefusedError) Error() string {
	return e.Message + " (" + e.Op + " refused by " + e.Peer + ")"
}

// Unwrap returns the sentinel of the refusal's code.
func (e *RefusedError) Unwrap() error { return e.err }
