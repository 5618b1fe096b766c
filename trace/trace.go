package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Format and Version identify the trace format (see README.md in
// this folder). A reader refuses any other format name or a newer version,
// and reads every older one. Version 2 adds the optional node fields role,
// lab and pool, version 3 the optional job field replicas; Write writes the
// lowest version that holds the trace, so a trace without them stays
// readable by older readers.
const (
	Format  = "reclaimnet-trace"
	Version = 3
	// FileName is the file a trace directory holds.
	FileName = "trace.jsonl"
)

// Record kinds, the "kind" field of every line.
const (
	KindHeader    = "header"
	KindNode      = "node"
	KindLink      = "link"
	KindDeparture = "departure"
	KindReturn    = "return"
	KindBandwidth = "bandwidth"
	KindJob       = "job"
)

// Header is the first line of a trace.
type Header struct {
	Kind    string `json:"kind"`
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Start is the wall-clock time of t = 0 (RFC 3339); time of day for
	// the hazard profile is taken from it.
	Start time.Time `json:"start"`
	// DurationS is the length of the trace in seconds.
	DurationS float64 `json:"duration_s"`
	Name      string  `json:"name,omitempty"`
	Source    string  `json:"source,omitempty"`
}

// NodeRec is one GPU machine.
type NodeRec struct {
	Kind       string  `json:"kind"`
	ID         string  `json:"id"`
	Building   string  `json:"building"`
	GPUModel   string  `json:"gpu_model"`
	GPUs       int     `json:"gpus"`
	VRAMGB     float64 `json:"vram_gb"`
	Capability float64 `json:"capability"`
	// AccessLink is the link ID from the node to its building switch.
	AccessLink string `json:"access_link"`
	// Absent marks a node that is away at t = 0 and joins at its first
	// return record (spot instances that appear later).
	Absent bool `json:"absent,omitempty"`
	// Role is RoleStorage for a machine that only keeps checkpoints (a
	// machine-room server or NAS): it hosts no jobs, is never lent nor
	// reclaimed (no departure or return record may name it), and its gpus
	// and vram_gb may be 0. Empty for a GPU node. Version 2.
	Role string `json:"role,omitempty"`
	// Lab and Pool name the failure domains a node shares with others
	// besides its building (a lab's room and schedule, a spot pool or
	// power circuit): the co-departure estimator's priors. Version 2.
	Lab  string `json:"lab,omitempty"`
	Pool string `json:"pool,omitempty"`
}

// RoleStorage is NodeRec.Role of a storage node.
const RoleStorage = "storage"

// Storage reports whether the node only keeps checkpoints.
func (n NodeRec) Storage() bool { return n.Role == RoleStorage }

// Needed returns the lowest format version that holds tr: 3 when a job
// names its replicas, 2 when a node uses a version-2 field, else 1.
func Needed(tr *Trace) int {
	for _, j := range tr.Jobs {
		if j.Replicas != 0 {
			return 3
		}
	}
	for _, n := range tr.Nodes {
		if n.Role != "" || n.Lab != "" || n.Pool != "" {
			return 2
		}
	}
	return 1
}

// LinkRec is one edge of the campus graph. A and B are node IDs, building
// switches ("sw-<building>") or "core".
type LinkRec struct {
	Kind        string  `json:"kind"`
	ID          string  `json:"id"`
	A           string  `json:"a"`
	B           string  `json:"b"`
	CapacityMbs float64 `json:"capacity_mbps"`
}

// Departure types.
const (
	Scheduled = "scheduled"
	Emergency = "emergency"
)

// DepartureRec is a node leaving at T seconds; a scheduled departure was
// announced NoticeS seconds earlier, an emergency one was not.
type DepartureRec struct {
	Kind    string  `json:"kind"`
	T       float64 `json:"t"`
	Node    string  `json:"node"`
	Type    string  `json:"type"`
	NoticeS float64 `json:"notice_s"`
}

// ReturnRec is a node coming back at T.
type ReturnRec struct {
	Kind string  `json:"kind"`
	T    float64 `json:"t"`
	Node string  `json:"node"`
}

// BandwidthRec is a sample of the bandwidth available to migration on a
// link (capacity minus research traffic), valid from T until the next
// sample of the same link.
type BandwidthRec struct {
	Kind         string  `json:"kind"`
	T            float64 `json:"t"`
	Link         string  `json:"link"`
	AvailableMbs float64 `json:"available_mbps"`
}

// JobRec is a job submitted at T.
type JobRec struct {
	Kind         string  `json:"kind"`
	T            float64 `json:"t"`
	ID           string  `json:"id"`
	GPUs         int     `json:"gpus"`
	VRAMGB       float64 `json:"vram_gb"`
	Capability   float64 `json:"capability"`
	WorkGPUh     float64 `json:"work_gpu_h"`
	CheckpointMB float64 `json:"checkpoint_mb"`
	RestartS     float64 `json:"restart_s"`
	LossBudgetS  float64 `json:"loss_budget_s"`
	// Replicas is k, how many nodes other than the host keep the job's
	// freshest committed checkpoint (1 to MaxReplicas, like `run
	// --replicas K`); 0 (absent) means the policy's default. Version 3.
	Replicas int `json:"replicas,omitempty"`
}

// MaxReplicas bounds JobRec.Replicas, as the agent bounds a job's k.
const MaxReplicas = 8

// Trace is a whole trace in memory, events in time order.
type Trace struct {
	Header     Header
	Nodes      []NodeRec
	Links      []LinkRec
	Departures []DepartureRec
	Returns    []ReturnRec
	Bandwidth  []BandwidthRec
	Jobs       []JobRec
}

// ParseError names the file and line of a bad trace record.
type ParseError struct {
	File string
	Line int
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// Load reads a trace from a file, or from FileName inside a
// directory.
func Load(path string) (*Trace, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, FileName)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// Read parses a trace; name is used in error messages.
func Read(r io.Reader, name string) (*Trace, error) {
	tr := &Trace{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	fail := func(format string, args ...any) error {
		return &ParseError{File: name, Line: line, Err: fmt.Errorf(format, args...)}
	}
	nodes := map[string]bool{}
	storage := map[string]bool{}
	links := map[string]bool{}
	jobs := map[string]bool{}
	vertices := map[string]bool{"core": true}
	lastT := 0.0
	haveHeader := false
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var probe struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(text), &probe); err != nil {
			return nil, fail("not a JSON object: %v", err)
		}
		if !haveHeader && probe.Kind != KindHeader {
			return nil, fail("first record is %q, want a %q record", probe.Kind, KindHeader)
		}
		dec := func(v any) error {
			d := json.NewDecoder(strings.NewReader(text))
			d.DisallowUnknownFields()
			if err := d.Decode(v); err != nil {
				return fail("%s record: %v", probe.Kind, err)
			}
			return nil
		}
		checkTime := func(t float64) error {
			if t < 0 {
				return fail("time %g is negative", t)
			}
			if t < lastT {
				return fail("time %g is before the previous event's time %g (events must be in time order)", t, lastT)
			}
			lastT = t
			return nil
		}
		needNode := func(id string) error {
			if !nodes[id] {
				return fail("unknown node %q", id)
			}
			if storage[id] {
				return fail("storage node %q never leaves nor returns", id)
			}
			return nil
		}
		switch probe.Kind {
		case KindHeader:
			if haveHeader {
				return nil, fail("second header record")
			}
			if err := dec(&tr.Header); err != nil {
				return nil, err
			}
			if tr.Header.Format != Format {
				return nil, fail("format %q, want %q", tr.Header.Format, Format)
			}
			if tr.Header.Version < 1 || tr.Header.Version > Version {
				return nil, fail("version %d not supported (this reader knows 1..%d)", tr.Header.Version, Version)
			}
			if tr.Header.DurationS <= 0 {
				return nil, fail("duration_s must be positive")
			}
			haveHeader = true
		case KindNode:
			var n NodeRec
			if err := dec(&n); err != nil {
				return nil, err
			}
			switch {
			case n.ID == "" || n.Building == "":
				return nil, fail("node record needs id and building")
			case nodes[n.ID]:
				return nil, fail("duplicate node %q", n.ID)
			case (n.Role != "" || n.Lab != "" || n.Pool != "") && tr.Header.Version < 2:
				return nil, fail("node %q: role, lab and pool need version 2 (the header says %d)", n.ID, tr.Header.Version)
			case n.Role != "" && n.Role != RoleStorage:
				return nil, fail("node %q: role %q, want %q or none", n.ID, n.Role, RoleStorage)
			case n.Storage() && n.Absent:
				return nil, fail("storage node %q cannot be absent (it never leaves)", n.ID)
			case n.Storage() && (n.GPUs < 0 || n.VRAMGB < 0):
				return nil, fail("storage node %q: negative gpus or vram_gb", n.ID)
			case n.Storage():
			case n.GPUs <= 0:
				return nil, fail("node %q: gpus must be positive", n.ID)
			case n.VRAMGB <= 0:
				return nil, fail("node %q: vram_gb must be positive", n.ID)
			}
			nodes[n.ID] = true
			if n.Storage() {
				storage[n.ID] = true
			}
			vertices[n.ID] = true
			vertices["sw-"+n.Building] = true
			tr.Nodes = append(tr.Nodes, n)
		case KindLink:
			var l LinkRec
			if err := dec(&l); err != nil {
				return nil, err
			}
			switch {
			case l.ID == "":
				return nil, fail("link record needs an id")
			case links[l.ID]:
				return nil, fail("duplicate link %q", l.ID)
			case !vertices[l.A] || !vertices[l.B]:
				return nil, fail("link %q: unknown endpoint (%q, %q); declare nodes before links", l.ID, l.A, l.B)
			case l.CapacityMbs <= 0:
				return nil, fail("link %q: capacity_mbps must be positive", l.ID)
			}
			links[l.ID] = true
			tr.Links = append(tr.Links, l)
		case KindDeparture:
			var d DepartureRec
			if err := dec(&d); err != nil {
				return nil, err
			}
			if err := checkTime(d.T); err != nil {
				return nil, err
			}
			if err := needNode(d.Node); err != nil {
				return nil, err
			}
			switch d.Type {
			case Emergency:
				if d.NoticeS != 0 {
					return nil, fail("emergency departure with notice_s %g (must be 0)", d.NoticeS)
				}
			case Scheduled:
				if d.NoticeS <= 0 {
					return nil, fail("scheduled departure needs notice_s > 0")
				}
			default:
				return nil, fail("departure type %q, want %q or %q", d.Type, Scheduled, Emergency)
			}
			tr.Departures = append(tr.Departures, d)
		case KindReturn:
			var r ReturnRec
			if err := dec(&r); err != nil {
				return nil, err
			}
			if err := checkTime(r.T); err != nil {
				return nil, err
			}
			if err := needNode(r.Node); err != nil {
				return nil, err
			}
			tr.Returns = append(tr.Returns, r)
		case KindBandwidth:
			var b BandwidthRec
			if err := dec(&b); err != nil {
				return nil, err
			}
			if err := checkTime(b.T); err != nil {
				return nil, err
			}
			if !links[b.Link] {
				return nil, fail("unknown link %q", b.Link)
			}
			if b.AvailableMbs < 0 {
				return nil, fail("negative available_mbps")
			}
			tr.Bandwidth = append(tr.Bandwidth, b)
		case KindJob:
			var j JobRec
			if err := dec(&j); err != nil {
				return nil, err
			}
			if err := checkTime(j.T); err != nil {
				return nil, err
			}
			switch {
			case j.ID == "":
				return nil, fail("job record needs an id")
			case jobs[j.ID]:
				return nil, fail("duplicate job %q", j.ID)
			case j.GPUs <= 0 || j.WorkGPUh <= 0 || j.CheckpointMB <= 0:
				return nil, fail("job %q: gpus, work_gpu_h and checkpoint_mb must be positive", j.ID)
			case j.RestartS < 0 || j.LossBudgetS < 0:
				return nil, fail("job %q: negative restart_s or loss_budget_s", j.ID)
			case j.Replicas != 0 && tr.Header.Version < 3:
				return nil, fail("job %q: replicas needs version 3 (the header says %d)", j.ID, tr.Header.Version)
			case j.Replicas < 0 || j.Replicas > MaxReplicas:
				return nil, fail("job %q: replicas %d, want 1 to %d (or none: the default)", j.ID, j.Replicas, MaxReplicas)
			}
			jobs[j.ID] = true
			tr.Jobs = append(tr.Jobs, j)
		case "":
			return nil, fail("record has no \"kind\"")
		default:
			return nil, fail("unknown record kind %q", probe.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if !haveHeader {
		return nil, &ParseError{File: name, Line: line, Err: errors.New("empty trace: no header record")}
	}
	for _, n := range tr.Nodes {
		if !links[n.AccessLink] {
			return nil, &ParseError{File: name, Line: line, Err: fmt.Errorf("node %q: access link %q is not declared", n.ID, n.AccessLink)}
		}
	}
	return tr, nil
}

// Write writes tr in the format Read reads, events merged in time
// order (departures, returns, bandwidth samples, jobs; stable for equal
// times).
func Write(w io.Writer, tr *Trace) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	h := tr.Header
	h.Kind, h.Format = KindHeader, Format
	h.Version = max(h.Version, Needed(tr))
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	for _, n := range tr.Nodes {
		n.Kind = KindNode
		if err := enc.Encode(n); err != nil {
			return fmt.Errorf("write node: %w", err)
		}
	}
	for _, l := range tr.Links {
		l.Kind = KindLink
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("write link: %w", err)
		}
	}
	type ev struct {
		t     float64
		order int
		v     any
	}
	var evs []ev
	for _, d := range tr.Departures {
		d.Kind = KindDeparture
		evs = append(evs, ev{d.T, len(evs), d})
	}
	for _, r := range tr.Returns {
		r.Kind = KindReturn
		evs = append(evs, ev{r.T, len(evs), r})
	}
	for _, b := range tr.Bandwidth {
		b.Kind = KindBandwidth
		evs = append(evs, ev{b.T, len(evs), b})
	}
	for _, j := range tr.Jobs {
		j.Kind = KindJob
		evs = append(evs, ev{j.T, len(evs), j})
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].t < evs[b].t })
	for _, e := range evs {
		if err := enc.Encode(e.v); err != nil {
			return fmt.Errorf("write event: %w", err)
		}
	}
	return bw.Flush()
}

// Save writes tr to dir/FileName, creating dir.
func Save(dir string, tr *Trace) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create trace dir: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, FileName))
	if err != nil {
		return fmt.Errorf("create trace: %w", err)
	}
	if err := Write(f, tr); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
