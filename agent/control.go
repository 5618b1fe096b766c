package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
)

// SocketFile is the control socket's name inside the data dir.
const SocketFile = "agent.sock"

// InfoFile, inside the data dir, names the agent's bound addresses once it
// is up (tests and scripts read it instead of guessing ports).
const InfoFile = "agent.json"

// Control operations.
const (
	OpStatus  = "status"
	OpMembers = "members"
	OpJoin    = "join"
)

// Request is one control request: one JSON object per connection.
type Request struct {
	Op    string   `json:"op"`
	Peers []string `json:"peers,omitempty"`
	// Job is the job to submit (OpRun); JobID the job of OpLogs and
	// OpCancel; Tail how many bytes of the log's end OpLogs returns (0:
	// up to 4 MiB).
	Job   *JobRequest `json:"job,omitempty"`
	JobID string      `json:"job_id,omitempty"`
	Tail  int64       `json:"tail,omitempty"`
	// Notice is a scheduled reclaim's notice (OpReclaim).
	Notice time.Duration `json:"notice,omitempty"`
}

// Error kinds in Response.Kind, so the CLI can explain a failure.
const (
	KindPeerUnreachable = "peer_unreachable"
	KindWrongGossipKey  = "wrong_gossip_key"
	KindBadRequest      = "bad_request"
	KindInternal        = "internal"
)

// Response answers a Request.
type Response struct {
	Error  string  `json:"error,omitempty"`
	Kind   string  `json:"kind,omitempty"`
	Status *Status `json:"status,omitempty"`
	// Document is, for OpStatus, the GET /v1/status document exactly as
	// the HTTP API serves it (a web.Status).
	Document json.RawMessage `json:"document,omitempty"`
	Joined   int             `json:"joined,omitempty"`
	// Trace is the cluster's history in the simulator's trace format
	// (JSON Lines, OpTraceExport).
	Trace string `json:"trace,omitempty"`
	// JobID is the submitted or cancelled job; Jobs the list (OpJobs);
	// Log a job's log, Node the node it runs on, Note a remark (OpLogs).
	JobID string    `json:"job_id,omitempty"`
	Jobs  []JobInfo `json:"jobs,omitempty"`
	Log   string    `json:"log,omitempty"`
	Node  string    `json:"node,omitempty"`
	Note  string    `json:"note,omitempty"`
	// Reclaim is the reclaim's progress (the reclaim operations).
	Reclaim *ReclaimStatus `json:"reclaim,omitempty"`
}

// Info is what the agent writes to InfoFile.
type Info struct {
	PID          int    `json:"pid"`
	Node         string `json:"node"`
	GossipAddr   string `json:"gossip_addr"`
	RaftAddr     string `json:"raft_addr"`
	TransferAddr string `json:"transfer_addr"`
	HTTPAddr     string `json:"http_addr"`
	Socket       string `json:"socket"`
}

// listenControl creates the Unix socket with mode 0600. A socket file left
// by a dead agent is removed (the data-dir lock proves no agent uses it).
func listenControl(dir string) (net.Listener, error) {
	path := filepath.Join(dir, SocketFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket permissions: %w", err)
	}
	return ln, nil
}

// serveControl answers requests until the listener is closed.
func (a *Agent) serveControl(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		a.wg.Go(func() { a.handleControl(conn) })
	}
}

func (a *Agent) handleControl(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req Request
	dec := json.NewDecoder(io.LimitReader(bufio.NewReader(conn), 64<<10))
	resp := Response{}
	if err := dec.Decode(&req); err != nil {
		resp = Response{Error: fmt.Sprintf("bad request: %v", err), Kind: KindBadRequest}
	} else {
		resp = a.control(req)
	}
	json.NewEncoder(conn).Encode(resp)
}

func (a *Agent) control(req Request) Response {
	switch req.Op {
	case OpMembers:
		st := a.Status()
		return Response{Status: &st}
	case OpStatus:
		st := a.Status()
		doc, err := a.webDocument()
		if err != nil {
			return Response{Error: err.Error(), Kind: KindInternal}
		}
		return Response{Status: &st, Document: doc}
	case OpJoin:
		if len(req.Peers) == 0 {
			return Response{Error: "join: no peers", Kind: KindBadRequest}
		}
		n, err := a.Join(req.Peers)
		if err != nil {
			kind := KindInternal
			switch {
			case errors.Is(err, mesh.ErrPeerUnreachable):
				kind = KindPeerUnreachable
			case errors.Is(err, mesh.ErrWrongGossipKey):
				kind = KindWrongGossipKey
			}
			return Response{Error: err.Error(), Kind: kind}
		}
		return Response{Joined: n}
	case OpRun, OpJobs, OpLogs, OpCancel:
		return a.jobControl(req)
	case OpTraceExport:
		doc, err := a.traceDocument(time.Now())
		if err != nil {
			return Response{Error: err.Error(), Kind: KindInternal}
		}
		return Response{Trace: string(doc)}
	case OpReclaim, OpReclaimStatus, OpReclaimCancel, OpReclaimNow:
		return a.reclaimControl(req)
	}
	return Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: KindBadRequest}
}

// ErrNoAgent is returned by Call when no agent listens on the data dir.
var ErrNoAgent = errors.New("no agent running")

// Call sends one request to the agent whose data dir is dir.
func Call(ctx context.Context, dir string, req Request) (Response, error) {
	path := filepath.Join(dir, SocketFile)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errConnRefused()) {
			return Response{}, fmt.Errorf("%w with data dir %s (start one with 'reclaimnet agent', or set --data-dir / RECLAIMNET_DATA_DIR)", ErrNoAgent, dir)
		}
		return Response{}, fmt.Errorf("reach agent at %s: %w", path, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Response{}, fmt.Errorf("send request: %w", err)
	}
	var resp Response
	if err := json.NewDecoder(io.LimitReader(conn, 64<<20)).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("read response: %w", err)
	}
	return resp, nil
}
