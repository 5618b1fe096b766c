package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// CommandVersion is the encoding version this build writes and the only one
// it reads. A change that alters how existing bytes decode (a renamed,
// removed or retyped field, a new required field) bumps it; an optional
// field whose zero value keeps the old meaning does not (see the package
// doc). A node that meets a newer version rejects the command with
// ErrUnknownVersion instead of guessing.
const CommandVersion = 1

// MaxCommandSize bounds an encoded command (a forwarded one is rejected
// before it is read further).
const MaxCommandSize = 8 << 20

// Errors a caller can match.
var (
	ErrUnknownVersion  = errors.New("unknown command version")
	ErrUnknownCommand  = errors.New("unknown command kind")
	ErrInvalidCommand  = errors.New("invalid command")
	ErrUnknownJob      = errors.New("unknown job")
	ErrJobExists       = errors.New("job exists with a different definition")
	ErrManifestClash   = errors.New("checkpoint version exists with a different manifest")
	ErrStaleMove       = errors.New("job is not on the node the move starts from")
	ErrNotHost         = errors.New("node does not host the job")
	ErrCommandTooLarge = errors.New("command too large")
	// ErrNotPresyncTarget: a pre-sync report names a node that is neither
	// the job's standby nor its admitted hand-off's destination.
	ErrNotPresyncTarget = errors.New("node receives no pre-sync of the job")
	// ErrStalePresync: a pre-sync report names a version that is not the
	// job's freshest committed one, or a node the catalogue does not list
	// as its holder.
	ErrStalePresync = errors.New("pre-sync report is not of the freshest committed version's holder")
)

// Kind identifies a command type in its encoding.
type Kind uint8

// Command kinds. Values are part of the log format: never reuse one.
const (
	KindUpsertNode Kind = iota + 1
	KindSubmitJob
	KindCancelJob
	KindJobReport
	KindMoveJob
	KindReplicaComplete
	KindAnnounceReclaim
	KindCancelReclaim
	KindRecordDeparture
	KindPublishHazards
	KindSetDecisions
	KindRecordReclaimReport
	KindJobExited
	KindAddToken
	KindRevokeToken
	KindEnrollNode
	KindRenewCert
	KindRemoveNode
	KindSetSecretsKey
)

var kindNames = map[Kind]string{
	KindUpsertNode:      "upsert-node",
	KindSubmitJob:       "submit-job",
	KindCancelJob:       "cancel-job",
	KindJobReport:       "job-report",
	KindMoveJob:         "move-job",
	KindReplicaComplete: "replica-complete",
	KindAnnounceReclaim: "announce-reclaim",
	KindCancelReclaim:   "cancel-reclaim",
	KindRecordDeparture: "record-departure",
	KindPublishHazards:  "publish-hazards",
	KindSetDecisions:    "set-decisions",

	KindRecordReclaimReport: "record-reclaim-report",
	KindJobExited:           "job-exited",
	KindAddToken:            "add-token",
	KindRevokeToken:         "revoke-token",
	KindEnrollNode:          "enroll-node",
	KindRenewCert:           "renew-cert",
	KindRemoveNode:          "remove-node",
	KindSetSecretsKey:       "set-secrets-key",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Command is one change to the replicated state. Every command is
// idempotent: applying it a second time changes nothing.
type Command interface {
	Kind() Kind
	validate() error
}

// UpsertNode records a node as the leader sees it in gossip (replaces the
// whole record).
type UpsertNode struct{ Node NodeRecord }

// SubmitJob adds a job. Submitting the same definition again is a no-op; a
// different definition under an existing ID is ErrJobExists.
type SubmitJob struct{ Job JobRecord }

// CancelJob ends a job as cancelled, by By (the user, as the node that
// took the request names them) at At. Requester is who asked, for the
// leader's check (only its owner or an admin may).
type CancelJob struct {
	Job       policy.JobID
	By        string    `json:",omitempty"`
	At        time.Time `json:",omitzero"`
	Requester Requester `json:",omitzero"`
}

// Requester is the user who asked for a command, as the node that took the
// request identified them (SO_PEERCRED on its control socket). The leader
// checks a forwarded command against it: User's node part must be the
// forwarding node's certificate name (a node speaks for its own users
// only), and Admin, that node's word that User is one of its cluster
// admins, counts only from a voter (docs/trust.md).
type Requester struct {
	User  string `json:",omitempty"` // user@node
	Admin bool   `json:",omitempty"`
}

// Node is the node part of User ("" when User has none).
func (r Requester) Node() policy.NodeID {
	i := strings.LastIndexByte(r.User, '@')
	if i < 0 {
		return ""
	}
	return policy.NodeID(r.User[i+1:])
}

// maxRequesterLen bounds Requester.User (a user name and a node name).
const maxRequesterLen = 256

func (r Requester) validate() error {
	if len(r.User) > maxRequesterLen {
		return invalid("requester name of %d bytes", len(r.User))
	}
	return nil
}

// JobReport is the host's report about its job: measured restart time,
// checkpoint size, expected remaining time, and whether it finished. Values
// are absolute, so a repeated report changes nothing. Ready, when set, is
// when the job became ready on Node after a hand-off or a recovery (its
// first step there); the reclaim history keeps it as the outcome's
// Resumed, the end of the job's downtime.
type JobReport struct {
	Job             policy.JobID
	Node            policy.NodeID // the reporting host
	CheckpointBytes int64
	RestartTime     time.Duration
	Remaining       time.Duration
	Done            bool
	Ready           time.Time `json:",omitzero"`
	// With Ready: Restored is when the checkpoint the job resumes from was
	// restored on Node (zero: nothing to restore), and Limit the part of
	// its downtime limit Node can tell (design P3.8d: the bytes it
	// fetched ÷ their flow's rate + Tr). The history's outcome of the move
	// keeps both (zero from an older node).
	Restored time.Time     `json:",omitzero"`
	Limit    time.Duration `json:",omitzero"`
	// Presync, when its Node is set, is what the job's pre-sync target
	// holds (docs/design.md P1.6): the state turns it into the job's
	// Standby and StandbyHas.
	Presync Presync `json:",omitzero"`
}

// MoveJob records a finished hand-off: the job now runs on To, since At
// (zero from an older node: then the start is not recorded). Version is
// the checkpoint version To starts from; NoFinalCheckpoint is set when it
// is not a final checkpoint written for this hand-off (that failed, or
// none was ordered), so the work since its commit is lost. Both zero from
// an older node. Stopped is when the job stopped computing on From (its
// final checkpoint's request, or its stop without one); To measures the
// hand-off's downtime from it.
type MoveJob struct {
	Job               policy.JobID
	From, To          policy.NodeID
	At                time.Time `json:",omitzero"`
	Stopped           time.Time `json:",omitzero"`
	Version           uint64    `json:",omitempty"`
	NoFinalCheckpoint bool      `json:",omitempty"`
	// Limit is the hand-off's downtime limit (design P3.8d: the bytes To
	// lacked ÷ the final transfer's rate when it started + Tr + one
	// control period); zero from an older node.
	Limit time.Duration `json:",omitzero"`
}

// ReplicaComplete says Holder has version Version of Job's checkpoint
// completely (after its atomic local commit). At most once per holder.
type ReplicaComplete struct {
	Job          policy.JobID
	Version      uint64
	ManifestHash string
	Size         int64
	Source       policy.NodeID
	Holder       policy.NodeID
	At           time.Time
}

// AnnounceReclaim records an owner's reclaim of a node (emergency when the
// deadline is not after the announcement).
type AnnounceReclaim struct{ Reclaim policy.Reclaim }

// CancelReclaim withdraws a pending reclaim.
type CancelReclaim struct{ Node policy.NodeID }

// RecordDeparture logs a departure; the node leaves the active set, its
// pending reclaim is settled and jobs it hosted wait for recovery.
type RecordDeparture struct{ Departure Departure }

// PublishHazards replaces the leader's published hazard estimates.
type PublishHazards struct {
	At      time.Time
	Hazards map[policy.NodeID]policy.HazardEstimate
}

// SetDecisions replaces the current decisions and applies their
// placements (the job is assigned to the node) and hand-offs (the job is
// migrating).
type SetDecisions struct{ Decisions DecisionRecord }

// RecordReclaimReport keeps the owner's report of a finished reclaim in
// the bounded reclaim history. A report for the same node and
// announcement replaces the earlier one (the reclaimed node may record it
// at completion and again, with Left set, at the deadline).
type RecordReclaimReport struct{ Report ReclaimReport }

func (UpsertNode) Kind() Kind          { return KindUpsertNode }
func (SubmitJob) Kind() Kind           { return KindSubmitJob }
func (CancelJob) Kind() Kind           { return KindCancelJob }
func (JobReport) Kind() Kind           { return KindJobReport }
func (MoveJob) Kind() Kind             { return KindMoveJob }
func (ReplicaComplete) Kind() Kind     { return KindReplicaComplete }
func (AnnounceReclaim) Kind() Kind     { return KindAnnounceReclaim }
func (CancelReclaim) Kind() Kind       { return KindCancelReclaim }
func (RecordDeparture) Kind() Kind     { return KindRecordDeparture }
func (PublishHazards) Kind() Kind      { return KindPublishHazards }
func (SetDecisions) Kind() Kind        { return KindSetDecisions }
func (RecordReclaimReport) Kind() Kind { return KindRecordReclaimReport }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidCommand, fmt.Sprintf(format, args...))
}

func (c UpsertNode) validate() error {
	if c.Node.ID == "" {
		return invalid("node without id")
	}
	if c.Node.GPUs < 0 {
		return invalid("node %s: negative GPU count", c.Node.ID)
	}
	return nil
}

func (c SubmitJob) validate() error {
	j := c.Job
	switch {
	case j.ID == "":
		return invalid("job without id")
	case len(j.Spec.Command) == 0:
		return invalid("job %s: empty command", j.ID)
	case j.GPUs < 0 || j.VRAM < 0 || j.CheckpointBytes < 0:
		return invalid("job %s: negative resource", j.ID)
	case j.MaxFailures < 0 || j.MaxFailures > MaxMaxFailures:
		return invalid("job %s: max failures %d, want 0 to %d", j.ID, j.MaxFailures, MaxMaxFailures)
	}
	if j.Copies != 0 {
		if err := ValidReplicas(j.Copies); err != nil {
			return invalid("job %s: %v", j.ID, err)
		}
	}
	if err := j.Spec.validate(); err != nil {
		return invalid("job %s: %v", j.ID, err)
	}
	return nil
}

func (c CancelJob) validate() error {
	if c.Job == "" {
		return invalid("cancel without job id")
	}
	if len(c.By) > 256 {
		return invalid("cancel of %s: canceller name of %d bytes", c.Job, len(c.By))
	}
	return c.Requester.validate()
}

func (c JobReport) validate() error {
	if c.Job == "" || c.Node == "" {
		return invalid("job report needs job and node")
	}
	if c.CheckpointBytes < 0 || c.RestartTime < 0 || c.Remaining < 0 || c.Limit < 0 {
		return invalid("job report %s: negative value", c.Job)
	}
	if !c.Restored.IsZero() && (c.Ready.IsZero() || c.Restored.After(c.Ready)) {
		return invalid("job report %s: restored after its start", c.Job)
	}
	return c.Presync.validate(c.Job, c.Node)
}

func (c MoveJob) validate() error {
	if c.Job == "" || c.From == "" || c.To == "" || c.From == c.To {
		return invalid("move needs a job and two different nodes")
	}
	if !c.Stopped.IsZero() && !c.At.IsZero() && c.Stopped.After(c.At) {
		return invalid("move %s: stopped after the move", c.Job)
	}
	if c.Limit < 0 {
		return invalid("move %s: negative limit", c.Job)
	}
	return nil
}

func (c ReplicaComplete) validate() error {
	switch {
	case c.Job == "" || c.Holder == "" || c.Source == "":
		return invalid("replica-complete needs job, source and holder")
	case c.Version == 0:
		return invalid("replica-complete %s: version 0", c.Job)
	case c.ManifestHash == "":
		return invalid("replica-complete %s v%d: empty manifest hash", c.Job, c.Version)
	case c.Size < 0:
		return invalid("replica-complete %s v%d: negative size", c.Job, c.Version)
	}
	return nil
}

func (c AnnounceReclaim) validate() error {
	if c.Reclaim.Node == "" {
		return invalid("reclaim without node")
	}
	if c.Reclaim.Deadline.Before(c.Reclaim.Announced) {
		return invalid("reclaim of %s: deadline before announcement", c.Reclaim.Node)
	}
	return nil
}

func (c CancelReclaim) validate() error {
	if c.Node == "" {
		return invalid("cancel-reclaim without node")
	}
	return nil
}

func (c RecordDeparture) validate() error {
	d := c.Departure
	if d.Node == "" {
		return invalid("departure without node")
	}
	if d.Kind != DepartureScheduled && d.Kind != DepartureEmergency {
		return invalid("departure of %s: kind %d", d.Node, d.Kind)
	}
	if d.At.IsZero() {
		return invalid("departure of %s without time", d.Node)
	}
	return nil
}

func (c PublishHazards) validate() error {
	for id, h := range c.Hazards {
		if id == "" {
			return invalid("hazard for empty node id")
		}
		for _, r := range slices.Concat(h.Emergency.Rates, h.EmergencyUpper.Rates, h.Departure.Rates, h.DepartureUpper.Rates) {
			if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
				return invalid("hazard of %s: rate %v", id, r)
			}
		}
	}
	return nil
}

func (c SetDecisions) validate() error {
	for _, p := range c.Decisions.Placements {
		switch {
		case p.Job == "":
			return invalid("placement without job")
		case p.To == "" && p.Reason == "":
			// A job no node can take stays where it is, with the reason.
			return invalid("placement of %s: neither a node nor a reason", p.Job)
		}
	}
	for _, h := range c.Decisions.Handoffs {
		if h.Job == "" || h.From == "" {
			return invalid("hand-off needs job and source")
		}
	}
	return nil
}

func (c RecordReclaimReport) validate() error {
	r := c.Report
	switch {
	case r.Node == "":
		return invalid("reclaim report without node")
	case r.Kind != DepartureScheduled && r.Kind != DepartureEmergency:
		return invalid("reclaim report of %s: kind %d", r.Node, r.Kind)
	case r.Announced.IsZero():
		return invalid("reclaim report of %s without announcement time", r.Node)
	case r.Deadline.Before(r.Announced):
		return invalid("reclaim report of %s: deadline before announcement", r.Node)
	case r.Isolate < 0 || r.UsedFor < 0 || r.BytesSent < 0:
		return invalid("reclaim report of %s: negative value", r.Node)
	case len(r.Moved)+len(r.Degraded)+len(r.Finished) > maxReportJobs || len(r.Jobs) > maxReportJobs:
		return invalid("reclaim report of %s: more than %d jobs", r.Node, maxReportJobs)
	}
	return nil
}

// EncodeCommand returns the log encoding of cmd: a version byte, a kind
// byte, then the command as JSON. Non-finite floats (which JSON cannot
// carry) are clamped first: ±Inf to ±MaxFloat64, NaN to 0.
func EncodeCommand(cmd Command) ([]byte, error) {
	if cmd == nil {
		return nil, invalid("nil command")
	}
	if err := cmd.validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(Normalize(cmd))
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", cmd.Kind(), err)
	}
	if len(body)+2 > MaxCommandSize {
		return nil, fmt.Errorf("encode %s: %d bytes: %w", cmd.Kind(), len(body)+2, ErrCommandTooLarge)
	}
	out := make([]byte, 0, len(body)+2)
	out = append(out, CommandVersion, byte(cmd.Kind()))
	return append(out, body...), nil
}

// DecodeCommand parses and validates an encoded command. Bytes from
// another version, of an unknown kind, with unknown fields or invalid
// values are rejected with an error that says which.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, invalid("%d bytes, need at least 2", len(b))
	}
	if len(b) > MaxCommandSize {
		return nil, fmt.Errorf("decode: %d bytes: %w", len(b), ErrCommandTooLarge)
	}
	if b[0] != CommandVersion {
		return nil, fmt.Errorf("%w: %d (this node reads version %d)", ErrUnknownVersion, b[0], CommandVersion)
	}
	var cmd Command
	switch Kind(b[1]) {
	case KindUpsertNode:
		cmd = decodeAs[UpsertNode]()
	case KindSubmitJob:
		cmd = decodeAs[SubmitJob]()
	case KindCancelJob:
		cmd = decodeAs[CancelJob]()
	case KindJobReport:
		cmd = decodeAs[JobReport]()
	case KindMoveJob:
		cmd = decodeAs[MoveJob]()
	case KindReplicaComplete:
		cmd = decodeAs[ReplicaComplete]()
	case KindAnnounceReclaim:
		cmd = decodeAs[AnnounceReclaim]()
	case KindCancelReclaim:
		cmd = decodeAs[CancelReclaim]()
	case KindRecordDeparture:
		cmd = decodeAs[RecordDeparture]()
	case KindPublishHazards:
		cmd = decodeAs[PublishHazards]()
	case KindSetDecisions:
		cmd = decodeAs[SetDecisions]()
	case KindRecordReclaimReport:
		cmd = decodeAs[RecordReclaimReport]()
	case KindJobExited:
		cmd = decodeAs[JobExited]()
	case KindAddToken:
		cmd = decodeAs[AddToken]()
	case KindRevokeToken:
		cmd = decodeAs[RevokeToken]()
	case KindEnrollNode:
		cmd = decodeAs[EnrollNode]()
	case KindRenewCert:
		cmd = decodeAs[RenewCert]()
	case KindRemoveNode:
		cmd = decodeAs[RemoveNode]()
	case KindSetSecretsKey:
		cmd = decodeAs[SetSecretsKey]()
	default:
		return nil, fmt.Errorf("%w: %d", ErrUnknownCommand, b[1])
	}
	dec := json.NewDecoder(bytes.NewReader(b[2:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cmd); err != nil {
		return nil, fmt.Errorf("%w: decode %s: %v", ErrInvalidCommand, Kind(b[1]), err)
	}
	// dec.More misses a stray '}' or ']', so require the end of input.
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("decode %s: trailing data", Kind(b[1]))
	}
	// cmd holds a pointer; hand back the value so callers switch on values.
	val := reflect.ValueOf(cmd).Elem().Interface().(Command)
	if err := val.validate(); err != nil {
		return nil, err
	}
	return val, nil
}

// decodeAs returns a pointer to a zero T as a Command (pointer receivers
// inherit the value methods).
func decodeAs[T Command]() Command {
	var v T
	return any(&v).(Command)
}

// Normalize returns a copy of v with every float64 reachable from it made
// finite (JSON cannot carry NaN or ±Inf) and every time.Time in UTC without
// a monotonic reading (so decoded values compare equal). v is not changed.
func Normalize(v any) any {
	rv := reflect.ValueOf(v)
	out := reflect.New(rv.Type()).Elem()
	out.Set(rv)
	clampFloats(out)
	return out.Interface()
}

var timeType = reflect.TypeFor[time.Time]()

func clampFloats(v reflect.Value) {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		switch {
		case math.IsNaN(f):
			v.SetFloat(0)
		case math.IsInf(f, 1):
			v.SetFloat(math.MaxFloat64)
		case math.IsInf(f, -1):
			v.SetFloat(-math.MaxFloat64)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(v.Interface().(time.Time).UTC().Round(0)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				clampFloats(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		// Copy before writing so the caller's backing array stays intact.
		cp := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(cp, v)
		for i := range cp.Len() {
			clampFloats(cp.Index(i))
		}
		v.Set(cp)
	case reflect.Map:
		if v.IsNil() {
			return
		}
		cp := reflect.MakeMapWithSize(v.Type(), v.Len())
		iter := v.MapRange()
		for iter.Next() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			clampFloats(e)
			cp.SetMapIndex(iter.Key(), e)
		}
		v.Set(cp)
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Pointer {
			e := reflect.New(v.Type().Elem())
			e.Elem().Set(v.Elem())
			clampFloats(e.Elem())
			v.Set(e)
			return
		}
		e := reflect.New(v.Elem().Type()).Elem()
		e.Set(v.Elem())
		clampFloats(e)
		v.Set(e)
	}
}
