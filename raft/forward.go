package raft

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/policy"
)

// ErrNotLeader is returned to a forwarded command that reached a node that
// is no longer the leader; Submit retries it.
var ErrNotLeader = errors.New("not the leader")

// ErrNoLeader is returned by Submit when no leader was known before the
// context ended.
var ErrNoLeader = errors.New("no leader")

// ErrForbidden is returned to a forwarded command its sender may not
// give: a kind only the leader itself applies, or a command about another
// node than the one the sender's certificate names.
var ErrForbidden = errors.New("command not allowed from this peer")

// sentinelCodes carry sentinel errors across a forwarded call, so that
// errors.Is works the same on every node.
var sentinelCodes = map[string]error{
	"unknown-version": state.ErrUnknownVersion,
	"unknown-command": state.ErrUnknownCommand,
	"invalid":         state.ErrInvalidCommand,
	"unknown-job":     state.ErrUnknownJob,
	"job-exists":      state.ErrJobExists,
	"manifest-clash":  state.ErrManifestClash,
	"stale-move":      state.ErrStaleMove,
	"not-host":        state.ErrNotHost,
	"too-large":       state.ErrCommandTooLarge,
	"not-leader":      ErrNotLeader,
	"forbidden":       ErrForbidden,
	// A join's commit refused by the registry: the joiner hears why.
	"wrong-token":     enroll.ErrWrongToken,
	"token-expired":   enroll.ErrTokenExpired,
	"token-revoked":   enroll.ErrTokenRevoked,
	"token-used-up":   enroll.ErrTokenUsedUp,
	"foreign-cluster": enroll.ErrForeignCluster,
	"name-taken":      enroll.ErrNameTaken,
	"unknown-token":   enroll.ErrUnknownToken,
	"not-enrolled":    enroll.ErrNotEnrolled,
}

// forwardReply is the leader's answer to one forwarded command.
type forwardReply struct {
	Index uint64 `json:",omitempty"`
	Code  string `json:",omitempty"`
	Error string `json:",omitempty"`
}

// RemoteError is an error the leader returned for a forwarded command.
type RemoteError struct {
	Leader string
	Msg    string
	code   error
}

func (e *RemoteError) Error() string { return fmt.Sprintf("leader %s: %s", e.Leader, e.Msg) }

// Unwrap returns the sentinel the leader's error matched, if any.
func (e *RemoteError) Unwrap() error { return e.code }

func replyFor(index uint64, err error) forwardReply {
	if err == nil {
		return forwardReply{Index: index}
	}
	r := forwardReply{Error: err.Error()}
	for code, sentinel := range sentinelCodes {
		if errors.Is(err, sentinel) {
			r.Code = code
			break
		}
	}
	return r
}

func (r forwardReply) err(leader string) error {
	if r.Error == "" && r.Code == "" {
		return nil
	}
	return &RemoteError{Leader: leader, Msg: r.Error, code: sentinelCodes[r.Code]}
}

// maxReplySize bounds a reply frame.
const maxReplySize = 64 << 10

// writeFrame writes a 4-byte big-endian length and b.
func writeFrame(w io.Writer, b []byte) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
	if _, err := w.Write(append(hdr[:], b...)); err != nil {
		return err
	}
	return nil
}

// readFrame reads one frame of at most limit bytes.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("frame of %d bytes (limit %d): %w", n, limit, state.ErrCommandTooLarge)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeReply parses a reply frame.
func decodeReply(b []byte) (forwardReply, error) {
	var r forwardReply
	if err := json.Unmarshal(b, &r); err != nil {
		return forwardReply{}, fmt.Errorf("decode forward reply: %w", err)
	}
	return r, nil
}

// forwardIdle is how long a forwarded-command connection may sit idle.
const forwardIdle = 2 * time.Minute

// serveForward answers forwarded commands on one connection until the
// peer closes it. apply runs a command on this node as leader.
func serveForward(conn net.Conn, apply func([]byte) (uint64, error)) {
	br := bufio.NewReader(conn)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(forwardIdle))
		req, err := readFrame(br, state.MaxCommandSize)
		if err != nil {
			return
		}
		idx, aerr := apply(req)
		out, err := json.Marshal(replyFor(idx, aerr))
		if err != nil {
			return
		}
		_ = conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		if err := writeFrame(conn, out); err != nil {
			return
		}
	}
}

// forwardOnce sends one encoded command over conn and reads the reply.
func forwardOnce(conn net.Conn, leader string, cmd []byte, deadline time.Time) (uint64, error) {
	_ = conn.SetDeadline(deadline)
	if err := writeFrame(conn, cmd); err != nil {
		return 0, fmt.Errorf("forward to %s: %w", leader, err)
	}
	b, err := readFrame(conn, maxReplySize)
	if err != nil {
		return 0, fmt.Errorf("forward to %s: read reply: %w", leader, err)
	}
	r, err := decodeReply(b)
	if err != nil {
		return 0, err
	}
	return r.Index, r.err(leader)
}

// peerNode is the node name in the certificate of conn's peer (the
// handshake verified it against the cluster CA); empty when conn is not a
// TLS connection with a peer certificate.
func peerNode(conn net.Conn) policy.NodeID {
	if tc, ok := conn.(*trackedConn); ok {
		conn = tc.Conn
	}
	tlsConn, ok := conn.(*tls.Conn)
	if !ok {
		return ""
	}
	certs := tlsConn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	return policy.NodeID(certs[0].Subject.CommonName)
}

// forwarder is the node a forwarded command came from, as the leader
// knows it: the name in its certificate and whether it is a voter in the
// Raft configuration.
type forwarder struct {
	Node  policy.NodeID
	Voter bool
}

// checkForwarder says whether from may forward cmd to the leader, against
// the leader's state st. Every node of the cluster holds a valid
// certificate, so this is about limiting what one compromised or buggy
// node can claim (docs/trust.md):
//   - the leader-only kinds (the registry, departures, hazards, decisions,
//     the secrets key) are applied by the leader itself and never
//     forwarded;
//   - reports about a node (a job report from its host, a hand-off from
//     it, a reclaim of it or its cancellation, the owner's reclaim report,
//     a job's exit on it) must come from that node;
//   - a user's request (a submission, a cancel, a token, a removal)
//     carries its requester user@node, whose node must be from: a node
//     speaks for its own users only; the leader then checks what that
//     user may do: a cancel only by the job's owner or an admin, tokens
//     and removals only by an admin, and an admin only on a voter's word
//     (a voter holds the CA key, so its word adds nothing it could not
//     take; any other member's word would make root on a lab machine an
//     admin of every job);
//   - a join's or a renewal's commit only from a voter, the only nodes
//     that sign.
//
// Replica reports may come from any node (a sender reports its
// receiver's replica).
func checkForwarder(from forwarder, st *state.State, cmd state.Command) error {
	peer := from.Node
	var claimed policy.NodeID
	switch c := cmd.(type) {
	case state.UpsertNode, state.RecordDeparture, state.PublishHazards, state.SetDecisions, state.SetSecretsKey:
		return fmt.Errorf("%w: %s is applied by the leader only, not forwarded (from %q)", ErrForbidden, cmd.Kind(), peer)
	case state.JobReport:
		claimed = c.Node
	case state.JobExited:
		claimed = c.Exit.Node
	case state.MoveJob:
		claimed = c.From
	case state.AnnounceReclaim:
		claimed = c.Reclaim.Node
	case state.CancelReclaim:
		claimed = c.Node
	case state.RecordReclaimReport:
		claimed = c.Report.Node
	case state.SubmitJob:
		return checkRequester(from, cmd, state.Requester{User: c.Job.Owner})
	case state.CancelJob:
		if err := checkRequester(from, cmd, c.Requester); err != nil {
			return err
		}
		j, ok := st.Jobs[c.Job]
		if !ok || j.Owner == c.Requester.User || adminWord(from, c.Requester) {
			return nil // an unknown job is the state's refusal (ErrUnknownJob)
		}
		return fmt.Errorf("%w: cancel of job %s (owner %s) by %s: neither its owner nor a cluster admin%s",
			ErrForbidden, c.Job, j.Owner, c.Requester.User, adminHint(from, c.Requester))
	case state.AddToken:
		return checkAdmin(from, cmd, c.Requester)
	case state.RevokeToken:
		return checkAdmin(from, cmd, c.Requester)
	case state.RemoveNode:
		return checkAdmin(from, cmd, c.Requester)
	case state.EnrollNode, state.RenewCert:
		if !from.Voter {
			return fmt.Errorf("%w: %s from %q, which is not a voter (only voters sign certificates)", ErrForbidden, cmd.Kind(), peer)
		}
		return nil
	default:
		return nil
	}
	if peer != claimed {
		return fmt.Errorf("%w: %s about node %q sent by %q (a node speaks for itself only)", ErrForbidden, cmd.Kind(), claimed, peer)
	}
	return nil
}

// checkRequester refuses a user's request forwarded without a requester,
// or for a user of another node than the forwarder.
func checkRequester(from forwarder, cmd state.Command, r state.Requester) error {
	if r.User == "" {
		return fmt.Errorf("%w: %s from %q names no requesting user", ErrForbidden, cmd.Kind(), from.Node)
	}
	if r.Node() != from.Node {
		return fmt.Errorf("%w: %s for user %q sent by %q (a node speaks for its own users only)", ErrForbidden, cmd.Kind(), r.User, from.Node)
	}
	return nil
}

// checkAdmin refuses an admin's request unless a voter forwarded it for
// one of its own users it counts as an admin.
func checkAdmin(from forwarder, cmd state.Command, r state.Requester) error {
	if err := checkRequester(from, cmd, r); err != nil {
		return err
	}
	if !adminWord(from, r) {
		return fmt.Errorf("%w: %s by %s: not a cluster admin%s", ErrForbidden, cmd.Kind(), r.User, adminHint(from, r))
	}
	return nil
}

// adminWord reports whether the leader takes r as a cluster admin: its
// node (from, already checked to be r's) says so and is a voter.
func adminWord(from forwarder, r state.Requester) bool { return r.Admin && from.Voter }

// adminHint explains an admin claim the leader did not take.
func adminHint(from forwarder, r state.Requester) string {
	if r.Admin && !from.Voter {
		return fmt.Sprintf(" (node %s is not a voter: the cluster takes an admin's request from a voter only; 'reclaimnet members' shows them)", from.Node)
	}
	return ""
}
