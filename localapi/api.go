package localapi

import (
	"encoding/json"
	"time"
)

// Default addresses a node listens on (gossip, Raft and transfers on one
// address, the status page on loopback).
const (
	DefaultGossipPort   = 7946
	DefaultRaftPort     = 7947
	DefaultTransferPort = 7948
	DefaultHTTPAddr     = "127.0.0.1:7949"
)

// SocketFile is the control socket's name inside the data dir.
const SocketFile = "agent.sock"

// LockFile, inside the data dir, is the file the agent process holds an
// exclusive flock on while it runs (one agent per data dir).
const LockFile = "agent.lock"

// InfoFile, inside the data dir, names the agent's bound addresses once it
// is up (tests and scripts read it instead of guessing ports).
const InfoFile = "agent.json"

// Control operations.
const (
	OpStatus  = "status"
	OpMembers = "members"
	OpJoin    = "join"
	// OpTraceExport asks for the cluster's history in the simulator's
	// trace format (Response.Trace).
	OpTraceExport = "trace-export"
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
	// TTL and Uses are a new token's lifetime (0: a day) and number of
	// joins (0: any until it expires) (OpTokenCreate); TokenID the token
	// of OpTokenRevoke; Node the node of OpNodeRemove.
	TTL     time.Duration `json:"ttl,omitempty"`
	Uses    int           `json:"uses,omitempty"`
	TokenID string        `json:"token_id,omitempty"`
	Node    string        `json:"node,omitempty"`
	// Fetch says where OpFetch writes JobID's results.
	Fetch *FetchRequest `json:"fetch,omitempty"`
	// Until is the end of a lend (OpLend): "18:00", "Fri 18:00", "3h" or
	// an RFC 3339 time; empty follows the lending windows.
	Until string `json:"until,omitempty"`
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
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Warning is said about a request that was carried out (a job that
	// no node of the cluster can take now).
	Warning string  `json:"warning,omitempty"`
	Status  *Status `json:"status,omitempty"`
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
	// Story is one job's story (OpJob).
	Story *JobStory `json:"story,omitempty"`
	Log   string    `json:"log,omitempty"`
	Node  string    `json:"node,omitempty"`
	Note  string    `json:"note,omitempty"`
	// Fetched is what OpFetch delivered.
	Fetched *FetchInfo `json:"fetched,omitempty"`
	// Reclaim is the reclaim's progress (the reclaim operations).
	Reclaim *ReclaimStatus `json:"reclaim,omitempty"`
	// Token is a new join token, shown once (OpTokenCreate); Tokens the
	// list (OpTokenList).
	Token  string      `json:"token,omitempty"`
	Tokens []TokenInfo `json:"tokens,omitempty"`
	// Lend is the owner policy's status (the lending operations): an
	// owner.Status document (agent/owner), kept raw so that clients link
	// this package alone.
	Lend json.RawMessage `json:"lend,omitempty"`
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
	// Storage is set on a storage-role node (agent --role storage): it is
	// never lent, so reclaim --now refuses it before touching the
	// kill-switch.
	Storage bool `json:"storage,omitempty"`
}
