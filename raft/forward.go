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

// checkForwarder says whether peer may forward cmd to the leader. Every
// node of the cluster holds a valid certificate, so this is about limiting
// what one compromised or buggy node can claim:
//   - the leader-only kinds (the registry, departures, hazards, decisions)
//     are applied by the leader itself and never forwarded;
//   - reports about a node (a job report from its host, a reclaim of it or
//     its cancellation, the owner's reclaim report, a job's exit on it)
//     must come from that node.
//
// Job submissions, cancellations, moves and replica reports may come from
// any node (the CLI submits anywhere; a sender reports its receiver's
// replica).
func checkForwarder(peer policy.NodeID, cmd state.Command) error {
	var claimed policy.NodeID
	switch c := cmd.(type) {
	case state.UpsertNode, state.RecordDeparture, state.PublishHazards, state.SetDecisions:
		return fmt.Errorf("%w: %s is applied by the leader only, not forwarded (from %q)", ErrForbidden, cmd.Kind(), peer)
	case state.JobReport:
		claimed = c.Node
	case state.JobExited:
		claimed = c.Exit.Node
	case state.AnnounceReclaim:
		claimed = c.Reclaim.Node
	case state.CancelReclaim:
		claimed = c.Node
	case state.RecordReclaimReport:
		claimed = c.Report.Node
	default:
		return nil
	}
	if peer != claimed {
		return fmt.Errorf("%w: %s about node %q sent by %q (a node speaks for itself only)", ErrForbidden, cmd.Kind(), claimed, peer)
	}
	return nil
}
