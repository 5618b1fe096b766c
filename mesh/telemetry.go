package mesh

import (
	"errors"
	"fmt"
	"time"
)

// TelemetryVersion is the telemetry encoding this build writes; like Meta,
// newer versions only append fields. Version 2 appended the kill-switch
// state and its drop counter (a version 1 report reads as
// KillSwitchUnknown); version 3 the progress of the node's outgoing
// transfers (none in an older report); version 4 the state of the node's
// data directory and its free bytes (DataDirUnknown in an older report).
const TelemetryVersion = 4

// DataDirState is whether a node's data directory takes checkpoints.
type DataDirState uint8

const (
	// DataDirUnknown: not reported (an older node).
	DataDirUnknown DataDirState = iota
	// DataDirWritable: writable; DataFree says how much room is left.
	DataDirWritable
	// DataDirReadOnly: a write into it failed.
	DataDirReadOnly
)

// Limits on one telemetry report. A report must fit in one gossip packet
// next to memberlist's own messages, so it stays under 1 KiB.
const (
	MaxTelemetrySize         = 1024
	MaxBandwidthEntries      = 16
	MaxFlowEntries           = 8
	MaxFlowIDLen             = 160
	maxStateEntries          = 4096 // reports in one push/pull exchange
	maxStateSize             = 2 << 20
	msgTelemetry        byte = 1 // first byte of a telemetry broadcast
)

// BuildingBandwidth is the bandwidth a node sees towards one destination
// building, bytes/s: the smoothed estimate available to migration and its
// lower confidence bound (docs/design.md P1.7).
type BuildingBandwidth struct {
	Building     string
	Available    float64
	AvailableLow float64
}

// KillSwitchState is a node's kill-switch as it reports it (docs/design.md P3.7).
type KillSwitchState uint8

// Kill-switch states. The zero value is what a report without the field
// (an older node) reads as.
const (
	KillSwitchUnknown  KillSwitchState = iota // not reported, or unreadable
	KillSwitchDisabled                        // kernel enforcement is off on the node
	KillSwitchOff
	KillSwitchSoft     // new connections to protected ports dropped
	KillSwitchHard     // all traffic to protected ports dropped
	maxKillSwitchState = KillSwitchHard
)

var killSwitchNames = [...]string{"unknown", "disabled", "off", "soft", "hard"}

// String returns "unknown", "disabled", "off", "soft" or "hard".
func (k KillSwitchState) String() string {
	if k > maxKillSwitchState {
		return "unknown"
	}
	return killSwitchNames[k]
}

// errTelemetryTooLarge is Encode's error for a report over
// MaxTelemetrySize.
var errTelemetryTooLarge = errors.New("telemetry report too large")

// FlowProgress is how far one of the node's outgoing transfers that the
// leader admitted got, by the flow ID of the leader's decision: the bytes
// it still has to move, and whether the receiver committed it. Gossip
// carries it so that the leader sees every node's transfers, not only its
// own (a hand-off nearly done is not judged as not started).
type FlowProgress struct {
	ID        string
	Remaining uint64
	Done      bool
}

// Telemetry is one node's latest report. Reports from the same node are
// ordered by Seq: a report replaces the one a peer holds only if its Seq is
// higher.
type Telemetry struct {
	Node string
	Seq  uint64
	// Sent is when the node produced the report (its own clock).
	Sent     time.Time
	Load     float64 // 0..1 and above when overloaded
	FreeGPUs uint16
	// Hazard is the node's current emergency hazard λ̂⁺ (1/s) as last
	// published by the leader.
	Hazard    float64
	Bandwidth []BuildingBandwidth
	// Leaving is set in the last report of a node that leaves gracefully
	// (Mesh.Leave), so peers tell a departure from a failure.
	Leaving bool
	// KillSwitch is the node's kill-switch mode and KillSwitchDrops what
	// it dropped since the programs were loaded (version 2).
	KillSwitch      KillSwitchState
	KillSwitchDrops uint64
	// Flows is the progress of the node's outgoing admitted transfers
	// (version 3), at most MaxFlowEntries.
	Flows []FlowProgress
	// DataDir is the state of the node's data directory and DataFree
	// the bytes free on its file system (version 4).
	DataDir  DataDirState
	DataFree uint64
}

// Telemetry flag bits.
const flagLeaving byte = 1 << 0

// Encode returns the broadcast form of t (message type, version, fields).
func (t Telemetry) Encode() ([]byte, error) {
	if len(t.Node) == 0 || len(t.Node) > MaxNodeNameLen {
		return nil, fmt.Errorf("telemetry node name %q: want 1 to %d bytes", t.Node, MaxNodeNameLen)
	}
	if len(t.Bandwidth) > MaxBandwidthEntries {
		return nil, fmt.Errorf("telemetry has %d bandwidth entries, over %d", len(t.Bandwidth), MaxBandwidthEntries)
	}
	if len(t.Flows) > MaxFlowEntries {
		return nil, fmt.Errorf("telemetry has %d flow entries, over %d", len(t.Flows), MaxFlowEntries)
	}
	w := writer{buf: make([]byte, 0, 128)}
	w.byte(msgTelemetry)
	w.byte(TelemetryVersion)
	w.string(t.Node)
	w.uvarint(t.Seq)
	w.varint(t.Sent.UnixNano())
	w.float64(t.Load)
	w.uint16(t.FreeGPUs)
	w.float64(t.Hazard)
	var flags byte
	if t.Leaving {
		flags |= flagLeaving
	}
	w.byte(flags)
	w.uvarint(uint64(len(t.Bandwidth)))
	for _, b := range t.Bandwidth {
		if len(b.Building) > MaxBuildingLen {
			return nil, fmt.Errorf("telemetry building %q: longer than %d bytes", b.Building, MaxBuildingLen)
		}
		w.string(b.Building)
		w.float64(b.Available)
		w.float64(b.AvailableLow)
	}
	if t.KillSwitch > maxKillSwitchState {
		return nil, fmt.Errorf("telemetry kill-switch state %d unknown", t.KillSwitch)
	}
	w.byte(byte(t.KillSwitch))
	w.uvarint(t.KillSwitchDrops)
	w.uvarint(uint64(len(t.Flows)))
	for _, f := range t.Flows {
		if len(f.ID) == 0 || len(f.ID) > MaxFlowIDLen {
			return nil, fmt.Errorf("telemetry flow ID %q: want 1 to %d bytes", f.ID, MaxFlowIDLen)
		}
		w.string(f.ID)
		w.uvarint(f.Remaining)
		var done byte
		if f.Done {
			done = 1
		}
		w.byte(done)
	}
	if t.DataDir > DataDirReadOnly {
		return nil, fmt.Errorf("telemetry data directory state %d unknown", t.DataDir)
	}
	w.byte(byte(t.DataDir))
	w.uvarint(t.DataFree)
	if len(w.buf) > MaxTelemetrySize {
		return nil, fmt.Errorf("%w: %d bytes, over %d", errTelemetryTooLarge, len(w.buf), MaxTelemetrySize)
	}
	return w.buf, nil
}

// DecodeTelemetry parses a telemetry broadcast from a peer. Malformed input
// returns an error wrapping ErrMalformed.
func DecodeTelemetry(b []byte) (Telemetry, error) {
	if len(b) > MaxTelemetrySize {
		return Telemetry{}, fmt.Errorf("%w: telemetry of %d bytes", ErrMalformed, len(b))
	}
	r := reader{buf: b}
	if typ := r.byte("message type"); r.err == nil && typ != msgTelemetry {
		return Telemetry{}, fmt.Errorf("%w: message type %d is not telemetry", ErrMalformed, typ)
	}
	v := r.byte("version")
	if r.err == nil && v == 0 {
		r.fail("telemetry version 0")
	}
	var t Telemetry
	t.Node = r.string("node name", MaxNodeNameLen)
	t.Seq = r.uvarint("sequence")
	sent := r.varint("sent time")
	t.Load = r.float64("load")
	t.FreeGPUs = r.uint16("free gpus")
	t.Hazard = r.float64("hazard")
	flags := r.byte("flags")
	if r.err == nil && v <= TelemetryVersion && flags&^flagLeaving != 0 {
		r.fail("unknown flags %#x", flags)
	}
	t.Leaving = flags&flagLeaving != 0
	n := r.uvarint("bandwidth count")
	if r.err == nil && n > MaxBandwidthEntries {
		r.fail("%d bandwidth entries, over %d", n, MaxBandwidthEntries)
	}
	if r.err == nil && n > 0 {
		t.Bandwidth = make([]BuildingBandwidth, 0, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			var bw BuildingBandwidth
			bw.Building = r.string("building", MaxBuildingLen)
			bw.Available = r.float64("available bandwidth")
			bw.AvailableLow = r.float64("available bandwidth lower bound")
			t.Bandwidth = append(t.Bandwidth, bw)
		}
	}
	if v >= 2 {
		ks := KillSwitchState(r.byte("kill-switch state"))
		if r.err == nil && ks > maxKillSwitchState {
			if v == TelemetryVersion {
				r.fail("kill-switch state %d unknown", ks)
			}
			ks = KillSwitchUnknown // a newer node's state this build cannot name
		}
		t.KillSwitch = ks
		t.KillSwitchDrops = r.uvarint("kill-switch drops")
	}
	if v >= 3 {
		n := r.uvarint("flow count")
		if r.err == nil && n > MaxFlowEntries {
			r.fail("%d flow entries, over %d", n, MaxFlowEntries)
		}
		if r.err == nil && n > 0 {
			t.Flows = make([]FlowProgress, 0, n)
			for i := uint64(0); i < n && r.err == nil; i++ {
				var f FlowProgress
				f.ID = r.string("flow ID", MaxFlowIDLen)
				f.Remaining = r.uvarint("flow remaining bytes")
				switch done := r.byte("flow done"); {
				case r.err != nil:
				case done > 1:
					r.fail("flow done flag %d", done)
				case f.ID == "":
					r.fail("flow without an ID")
				default:
					f.Done = done == 1
				}
				t.Flows = append(t.Flows, f)
			}
		}
	}
	if v >= 4 {
		ds := DataDirState(r.byte("data directory state"))
		if r.err == nil && ds > DataDirReadOnly {
			if v == TelemetryVersion {
				r.fail("data directory state %d unknown", ds)
			}
			ds = DataDirUnknown // a newer node's state this build cannot name
		}
		t.DataDir = ds
		t.DataFree = r.uvarint("data directory free bytes")
	}
	if r.err != nil {
		return Telemetry{}, r.err
	}
	if len(t.Node) == 0 {
		return Telemetry{}, fmt.Errorf("%w: telemetry without a node name", ErrMalformed)
	}
	if v <= TelemetryVersion && len(r.buf) != 0 {
		return Telemetry{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.buf))
	}
	t.Sent = time.Unix(0, sent)
	return t, nil
}

// encodeState packs reports for a push/pull exchange: version, count, then
// each report with a length prefix. It stops before maxStateSize.
func encodeState(reports []Telemetry) []byte {
	w := writer{buf: make([]byte, 0, 64*len(reports)+8)}
	w.byte(TelemetryVersion)
	var body writer
	n := 0
	for _, t := range reports {
		b, err := t.Encode()
		if err != nil {
			continue // our own reports were checked when stored
		}
		if n == maxStateEntries || len(body.buf)+len(b)+4 > maxStateSize {
			break
		}
		body.uvarint(uint64(len(b)))
		body.buf = append(body.buf, b...)
		n++
	}
	w.uvarint(uint64(n))
	w.buf = append(w.buf, body.buf...)
	return w.buf
}

// decodeState parses a peer's push/pull state.
func decodeState(b []byte) ([]Telemetry, error) {
	if len(b) > maxStateSize+16 {
		return nil, fmt.Errorf("%w: state of %d bytes", ErrMalformed, len(b))
	}
	r := reader{buf: b}
	if v := r.byte("state version"); r.err == nil && v == 0 {
		r.fail("state version 0")
	}
	n := r.uvarint("state count")
	if r.err == nil && n > maxStateEntries {
		r.fail("%d reports in state, over %d", n, maxStateEntries)
	}
	if r.err != nil {
		return nil, r.err
	}
	out := make([]Telemetry, 0, min(n, 64))
	for i := uint64(0); i < n; i++ {
		size := r.uvarint("report length")
		if r.err != nil {
			return nil, r.err
		}
		if size > uint64(len(r.buf)) {
			return nil, fmt.Errorf("%w: report %d truncated", ErrMalformed, i)
		}
		t, err := DecodeTelemetry(r.buf[:size])
		if err != nil {
			return nil, fmt.Errorf("report %d: %w", i, err)
		}
		r.buf = r.buf[size:]
		out = append(out, t)
	}
	return out, nil
}
