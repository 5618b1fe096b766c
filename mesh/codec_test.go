package mesh

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func sampleMeta() Meta {
	return Meta{
		ID: "gpu-07", Building: "physics", RaftPort: 7947, TransferPort: 7948, HTTPPort: 7949,
		Role: RoleNonVoter, GPUs: 4, GPUModel: "A100-80GB", GPUVRAMMiB: 81920, GPUCapability: 80,
		Started: time.Unix(1_780_000_000, 0), Lending: "Mon-Fri 19:00-08:00; Sat,Sun (Europe/Berlin)", Outlook: []byte{1, 1, 0x80, 0x01, 0},
		Storage: true, Lab: "optics-lab", Pool: "spot-a",
	}
}

func sampleTelemetry() Telemetry {
	return Telemetry{
		Node: "gpu-07", Seq: 42, Sent: time.Unix(1_780_000_000, 123456789), Load: 0.35, FreeGPUs: 2,
		Hazard: 2.5e-4,
		Bandwidth: []BuildingBandwidth{
			{Building: "physics", Available: 102.5e6, AvailableLow: 80e6},
			{Building: "chemistry", Available: 30e6, AvailableLow: 21e6},
		},
		KillSwitch: KillSwitchSoft, KillSwitchDrops: 300,
	}
}

// sampleTelemetryFlows is sampleTelemetry with transfers in flight.
func sampleTelemetryFlows() Telemetry {
	t := sampleTelemetry()
	t.Flows = []FlowProgress{
		{ID: "mig/train-7", Remaining: 1_500_000_000},
		{ID: "ckpt/eval-2", Remaining: 0, Done: true},
	}
	return t
}

// sampleTelemetryV1 is sampleTelemetry as a version 1 node writes it:
// without the flow count (one byte, 0) and the kill-switch fields before
// it (a one-byte state and the one-byte varint 300 takes two bytes).
func sampleTelemetryV1(t testing.TB) []byte {
	t.Helper()
	b, err := sampleTelemetry().Encode()
	if err != nil {
		t.Fatal(err)
	}
	v1 := append([]byte(nil), b[:len(b)-4-v4Tail]...)
	v1[1] = 1
	return v1
}

// sampleTelemetryV2 is sampleTelemetry as a version 2 node writes it:
// without the flow count.
func sampleTelemetryV2(t testing.TB) []byte {
	t.Helper()
	b, err := sampleTelemetry().Encode()
	if err != nil {
		t.Fatal(err)
	}
	v2 := append([]byte(nil), b[:len(b)-1-v4Tail]...)
	v2[1] = 2
	return v2
}

// v4Tail is what version 4 appends to a report with its data directory
// unknown and no free bytes: the state byte and a one-byte count.
const v4Tail = 2

// sampleTelemetryV3 is sampleTelemetry as a version 3 node writes it:
// without the data directory.
func sampleTelemetryV3(t testing.TB) []byte {
	t.Helper()
	b, err := sampleTelemetry().Encode()
	if err != nil {
		t.Fatal(err)
	}
	v3 := append([]byte(nil), b[:len(b)-v4Tail]...)
	v3[1] = 3
	return v3
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{sampleMeta(), {ID: "x", Started: time.Unix(0, 0)}} {
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", m, err)
		}
		got, err := DecodeMeta(b)
		if err != nil {
			t.Fatalf("DecodeMeta: %v", err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

// TestMetaVersion1: metadata of a version-1 node (no lending fields, no
// flags, lab or pool) still decodes, with none.
func TestMetaVersion1(t *testing.T) {
	m := sampleMeta()
	m.Lending, m.Outlook, m.Storage, m.Lab, m.Pool = "", nil, false, "", ""
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	v1 := append([]byte(nil), b[:len(b)-6]...) // two empty strings, the flags, two empty strings, no paths
	v1[0] = 1
	got, err := DecodeMeta(v1)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("version 1: %+v, %v; want %+v", got, err, m)
	}
	if _, err := DecodeMeta(append(v1[:len(v1):len(v1)], 0)); err == nil {
		t.Error("a version-1 encoding with a trailing byte decoded")
	}
}

// TestMetaVersion2: a version-2 node (lending fields, no flags, lab or
// pool) is read as a node that is not a storage node and names no lab or
// pool; this version's unknown flags are malformed.
func TestMetaVersion2(t *testing.T) {
	m := sampleMeta()
	b, _ := m.Encode()
	tail := 1 + 1 + len(m.Lab) + 1 + len(m.Pool) + 1 // flags, lab, pool, no paths
	v2 := append([]byte{2}, b[1:len(b)-tail]...)
	got, err := DecodeMeta(v2)
	if err != nil {
		t.Fatalf("DecodeMeta(version 2): %v", err)
	}
	m.Storage, m.Lab, m.Pool = false, "", ""
	if !reflect.DeepEqual(got, m) {
		t.Errorf("version 2: got %+v, want %+v", got, m)
	}
	bad := append([]byte(nil), b...)
	bad[len(bad)-tail] = 0x81
	if _, err := DecodeMeta(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown flags: got %v, want ErrMalformed", err)
	}
}

// fullMeta is a Meta with every field at its limit: the longest strings,
// the largest numbers, the start time at its bound and the read-only paths
// filling their budget.
func fullMeta() Meta {
	m := sampleMeta()
	m.ID = strings.Repeat("n", MaxNodeNameLen)
	m.Building = strings.Repeat("b", MaxBuildingLen)
	m.RaftPort, m.TransferPort, m.HTTPPort = math.MaxUint16, math.MaxUint16, math.MaxUint16
	m.GPUs, m.GPUCapability = math.MaxUint16, math.MaxUint8
	m.GPUModel = strings.Repeat("g", MaxGPUModelLen)
	m.GPUVRAMMiB = math.MaxUint32
	m.Started = time.Unix(-maxStartUnix, 0)
	m.Lending = strings.Repeat("l", MaxLendingLen)
	m.Outlook = []byte(strings.Repeat("o", MaxOutlookLen))
	m.Lab, m.Pool = strings.Repeat("l", MaxDomainLen), strings.Repeat("p", MaxDomainLen)
	m.Paths = []string{"/" + strings.Repeat("d", 40), "/" + strings.Repeat("s", MaxPathsBytes-2-42)}
	return m
}

// The longest metadata the limits allow, every field at its limit at
// once, fits memberlist's cap (it is exactly maxMetaBytes, the bound the
// limits are chosen by), and one byte more in any field is refused by
// Encode instead of panicking memberlist.
func TestMetaLimits(t *testing.T) {
	m := fullMeta()
	b, err := m.Encode()
	if err != nil {
		t.Fatalf("Encode at the limits: %v", err)
	}
	if len(b) != maxMetaBytes || len(b) > memberlist.MetaMaxSize {
		t.Fatalf("encoded size %d, want the bound %d, within %d", len(b), maxMetaBytes, memberlist.MetaMaxSize)
	}
	if got, err := DecodeMeta(b); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip at the limits: %+v, %v", got, err)
	}
	for name, mutate := range map[string]func(*Meta){
		"name":     func(m *Meta) { m.ID += "n" },
		"building": func(m *Meta) { m.Building += "b" },
		"model":    func(m *Meta) { m.GPUModel += "g" },
		"lending":  func(m *Meta) { m.Lending += "l" },
		"outlook":  func(m *Meta) { m.Outlook = append(m.Outlook, 'o') },
		"lab":      func(m *Meta) { m.Lab += "l" },
		"pool":     func(m *Meta) { m.Pool += "p" },
		"paths":    func(m *Meta) { m.Paths[0] += "d" },
		"a path":   func(m *Meta) { m.Paths = append(m.Paths, "") },
		"start":    func(m *Meta) { m.Started = m.Started.Add(-time.Second) },
		"empty id": func(m *Meta) { m.ID = "" },
	} {
		mm := m
		mutate(&mm)
		if _, err := mm.Encode(); err == nil {
			t.Errorf("%s over the limit: Encode returned no error", name)
		}
	}
}

// A newer node may append fields; this build must read the fields it knows.
func TestMetaForwardCompatible(t *testing.T) {
	m := sampleMeta()
	b, _ := m.Encode()
	newer := append([]byte{MetaVersion + 1}, b[1:]...)
	newer = append(newer, 0xde, 0xad)
	got, err := DecodeMeta(newer)
	if err != nil {
		t.Fatalf("DecodeMeta(version %d with extra fields): %v", MetaVersion+1, err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("got %+v, want %+v", got, m)
	}
	if _, err := DecodeMeta(append(b, 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("same version with trailing bytes: got %v, want ErrMalformed", err)
	}
}

func TestDecodeMetaRejects(t *testing.T) {
	good, _ := sampleMeta().Encode()
	cases := map[string][]byte{
		"empty":        nil,
		"version 0":    append([]byte{0}, good[1:]...),
		"truncated":    good[:len(good)-1],
		"only version": {1},
		"huge length":  {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad utf8":     {1, 2, 0xff, 0xfe},
		"too long":     make([]byte, memberlist.MetaMaxSize+1),
	}
	badRole := append([]byte(nil), good...)
	badRole[1+1+len("gpu-07")+1+len("physics")+6] = 9
	cases["unknown role"] = badRole
	for name, b := range cases {
		if _, err := DecodeMeta(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want an error wrapping ErrMalformed", name, err)
		}
	}
}

func TestTelemetryRoundTrip(t *testing.T) {
	for _, tel := range []Telemetry{sampleTelemetry(), sampleTelemetryFlows(), {Node: "a", Sent: time.Unix(0, 5)}} {
		b, err := tel.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		got, err := DecodeTelemetry(b)
		if err != nil {
			t.Fatalf("DecodeTelemetry: %v", err)
		}
		if !got.Sent.Equal(tel.Sent) {
			t.Errorf("Sent: got %v, want %v", got.Sent, tel.Sent)
		}
		got.Sent = tel.Sent
		if !reflect.DeepEqual(got, tel) {
			t.Errorf("round trip: got %+v, want %+v", got, tel)
		}
	}
}

// A version 1 report (an older node) reads with the kill-switch unknown;
// a newer version's state this build cannot name reads as unknown too,
// while the same version with an unknown state is malformed.
func TestTelemetryKillSwitchCompatible(t *testing.T) {
	got, err := DecodeTelemetry(sampleTelemetryV1(t))
	if err != nil {
		t.Fatalf("DecodeTelemetry(version 1): %v", err)
	}
	want := sampleTelemetry()
	want.KillSwitch, want.KillSwitchDrops = KillSwitchUnknown, 0
	got.Sent = want.Sent
	if !reflect.DeepEqual(got, want) {
		t.Errorf("version 1: got %+v, want %+v", got, want)
	}
	if got.KillSwitch.String() != "unknown" {
		t.Errorf("version 1 kill-switch: got %q, want unknown", got.KillSwitch)
	}
	good, _ := sampleTelemetry().Encode()
	ksAt := len(good) - 4 - v4Tail
	newer := append([]byte(nil), good...)
	newer[1], newer[ksAt] = TelemetryVersion+1, 9
	newer = append(newer, 0xde, 0xad) // fields this build does not know
	got, err = DecodeTelemetry(newer)
	if err != nil {
		t.Fatalf("DecodeTelemetry(version %d): %v", TelemetryVersion+1, err)
	}
	if got.KillSwitch != KillSwitchUnknown || got.KillSwitchDrops != 300 || got.Seq != 42 {
		t.Errorf("newer version: got state %v drops %d seq %d, want unknown, 300, 42", got.KillSwitch, got.KillSwitchDrops, got.Seq)
	}
	same := append([]byte(nil), good...)
	same[ksAt] = 9
	if _, err := DecodeTelemetry(same); !errors.Is(err, ErrMalformed) {
		t.Errorf("current version with state 9: got %v, want ErrMalformed", err)
	}
	bad := sampleTelemetry()
	bad.KillSwitch = 9
	if _, err := bad.Encode(); err == nil {
		t.Error("Encode with state 9: no error")
	}
	for k, name := range map[KillSwitchState]string{KillSwitchUnknown: "unknown", KillSwitchDisabled: "disabled",
		KillSwitchOff: "off", KillSwitchSoft: "soft", KillSwitchHard: "hard", 9: "unknown"} {
		if k.String() != name {
			t.Errorf("KillSwitchState(%d).String() = %q, want %q", k, k.String(), name)
		}
	}
}

// A version 2 report (an older node) reads with no flows; a version 3
// reader of the current build reads every flow back.
func TestTelemetryFlowsCompatible(t *testing.T) {
	got, err := DecodeTelemetry(sampleTelemetryV2(t))
	if err != nil {
		t.Fatalf("DecodeTelemetry(version 2): %v", err)
	}
	want := sampleTelemetry()
	got.Sent = want.Sent
	if !reflect.DeepEqual(got, want) || got.Flows != nil {
		t.Errorf("version 2: got %+v, want %+v without flows", got, want)
	}
	b, err := sampleTelemetryFlows().Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err = DecodeTelemetry(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Flows) != 2 || got.Flows[0].ID != "mig/train-7" || got.Flows[0].Remaining != 1_500_000_000 || got.Flows[0].Done ||
		!got.Flows[1].Done {
		t.Errorf("flows: got %+v", got.Flows)
	}
}

// A version 3 report (an older node) reads with the data directory
// unknown; the current build reads the state and free bytes back.
func TestTelemetryDataDirCompatible(t *testing.T) {
	got, err := DecodeTelemetry(sampleTelemetryV3(t))
	if err != nil {
		t.Fatalf("DecodeTelemetry(version 3): %v", err)
	}
	want := sampleTelemetry()
	got.Sent = want.Sent
	if !reflect.DeepEqual(got, want) || got.DataDir != DataDirUnknown {
		t.Errorf("version 3: got %+v, want %+v", got, want)
	}
	tel := sampleTelemetry()
	tel.DataDir, tel.DataFree = DataDirReadOnly, 123<<30
	b, err := tel.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err = DecodeTelemetry(b); err != nil || got.DataDir != DataDirReadOnly || got.DataFree != 123<<30 {
		t.Errorf("data dir: got %v %d (%v), want read-only, 123 GiB", got.DataDir, got.DataFree, err)
	}
	tel.DataDir = 7
	if _, err := tel.Encode(); err == nil {
		t.Error("Encode with data dir state 7: no error")
	}
}

func TestTelemetryRejects(t *testing.T) {
	good, _ := sampleTelemetry().Encode()
	nan := sampleTelemetry()
	nan.Load = math.NaN()
	nanBytes, _ := nan.Encode()
	neg := sampleTelemetry()
	neg.Hazard = -1
	negBytes, _ := neg.Encode()
	flows, _ := sampleTelemetryFlows().Encode()
	badDone := append([]byte(nil), flows...)
	badDone[len(badDone)-1-v4Tail] = 2 // the last flow's done flag
	// The flow count is the last byte before version 4's fields in a
	// report without flows.
	manyFlows := append(append([]byte(nil), good[:len(good)-1-v4Tail]...), MaxFlowEntries+1)
	for range MaxFlowEntries + 1 {
		manyFlows = append(manyFlows, 1, 'f', 0, 0) // well-formed entries
	}
	manyFlows = append(manyFlows, 0, 0)
	badDir := append([]byte(nil), good...)
	badDir[len(badDir)-2] = 7
	cases := map[string][]byte{
		"bad done flag":  badDone,
		"bad data dir":   badDir,
		"too many flows": manyFlows,
		"empty":          nil,
		"wrong type":     append([]byte{9}, good[1:]...),
		"truncated":      good[:len(good)-3],
		"trailing":       append(append([]byte(nil), good...), 1),
		"nan load":       nanBytes,
		"negative rate":  negBytes,
		"too large":      make([]byte, MaxTelemetrySize+1),
	}
	for name, b := range cases {
		if _, err := DecodeTelemetry(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want an error wrapping ErrMalformed", name, err)
		}
	}
	tooMany := sampleTelemetry()
	tooMany.Bandwidth = make([]BuildingBandwidth, MaxBandwidthEntries+1)
	if _, err := tooMany.Encode(); err == nil {
		t.Errorf("Encode with %d bandwidth entries: no error", MaxBandwidthEntries+1)
	}
	for name, mutate := range map[string]func(*Telemetry){
		"too many flows": func(t *Telemetry) { t.Flows = make([]FlowProgress, MaxFlowEntries+1) },
		"empty flow ID":  func(t *Telemetry) { t.Flows[0].ID = "" },
		"long flow ID":   func(t *Telemetry) { t.Flows[0].ID = strings.Repeat("f", MaxFlowIDLen+1) },
	} {
		bad := sampleTelemetryFlows()
		mutate(&bad)
		if _, err := bad.Encode(); err == nil {
			t.Errorf("Encode with %s: no error", name)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	a, b := sampleTelemetry(), sampleTelemetry()
	b.Node, b.Seq = "gpu-08", 7
	got, err := decodeState(encodeState([]Telemetry{a, b}))
	if err != nil {
		t.Fatalf("decodeState: %v", err)
	}
	if len(got) != 2 || got[0].Node != "gpu-07" || got[1].Node != "gpu-08" || got[1].Seq != 7 {
		t.Errorf("got %+v, want gpu-07 and gpu-08 (seq 7)", got)
	}
	if _, err := decodeState([]byte{1, 5}); !errors.Is(err, ErrMalformed) {
		t.Errorf("count without reports: got %v, want ErrMalformed", err)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := sampleMeta().Encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 1, 'a'})
	f.Add(good[:len(good)/2])
	full, _ := fullMeta().Encode()
	f.Add(full)
	legacy := sampleMeta()
	legacy.Storage = false
	legacy.GPUModel, legacy.Lending = strings.Repeat("g", legacyGPUModelLen), strings.Repeat("l", legacyLendingLen)
	legacy.Paths = []string{"/" + strings.Repeat("p", 150), "/q"}
	f.Add(encodeLegacy(legacy))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever decodes must encode again within memberlist's limit.
		out, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded %+v but Encode fails: %v", m, err)
		}
		if len(out) > memberlist.MetaMaxSize {
			t.Fatalf("re-encoded to %d bytes", len(out))
		}
	})
}

func FuzzDecodeTelemetry(f *testing.F) {
	good, _ := sampleTelemetry().Encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{msgTelemetry, 1})
	f.Add(good[:len(good)-1])
	f.Add(sampleTelemetryV1(f))
	f.Add(sampleTelemetryV2(f))
	flows, _ := sampleTelemetryFlows().Encode()
	f.Add(flows)
	f.Fuzz(func(t *testing.T, b []byte) {
		tel, err := DecodeTelemetry(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if _, err := tel.Encode(); err != nil {
			t.Fatalf("decoded %+v but Encode fails: %v", tel, err)
		}
	})
}

func FuzzDecodeState(f *testing.F) {
	a := sampleTelemetry()
	f.Add(encodeState([]Telemetry{a}))
	f.Add(encodeState(nil))
	f.Add([]byte{1, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeState(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
	})
}

// A hostile peer's bytes reach the delegate directly; it must count them
// as bad and keep going.
func TestDelegateIgnoresGarbage(t *testing.T) {
	m := &Mesh{name: "self", reports: map[string]Telemetry{}, events: make(chan Event, 1)}
	m.logger = discardLogger()
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 1 }, RetransmitMult: 1}
	d := (*delegate)(m)
	d.NotifyMsg(nil)
	d.NotifyMsg([]byte{msgTelemetry, 1, 0xff})
	d.MergeRemoteState([]byte{1, 3, 0}, false)
	if got := m.bad.Load(); got != 3 {
		t.Errorf("bad messages counted: got %d, want 3", got)
	}
	good, _ := sampleTelemetry().Encode()
	buf := append([]byte(nil), good...)
	d.NotifyMsg(buf)
	for i := range buf {
		buf[i] = 0 // memberlist reuses its buffer: the stored report must not change
	}
	got, ok := m.Report("gpu-07")
	if !ok || got.Seq != 42 || got.Bandwidth[1].Building != "chemistry" {
		t.Fatalf("report after NotifyMsg: got %+v (found %v), want seq 42 with chemistry", got, ok)
	}
	older := sampleTelemetry()
	older.Seq, older.Load = 41, 0.9
	ob, _ := older.Encode()
	d.NotifyMsg(ob)
	if got, _ := m.Report("gpu-07"); got.Load != 0.35 {
		t.Errorf("older report replaced newer: load %v, want 0.35", got.Load)
	}
	if q := m.queue.NumQueued(); q != 1 {
		t.Errorf("queued broadcasts: got %d, want 1 (only the fresh report is passed on)", q)
	}
}

// Version 4 carries the read-only paths; over their limit, or beside every
// other field at its limit, Encode refuses them.
func TestMetaPaths(t *testing.T) {
	m := sampleMeta()
	m.Paths = []string{"/datasets", "/scratch/shared"}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeMeta(b); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip with paths: %+v, %v", got, err)
	}
	m.Paths = []string{"/" + strings.Repeat("p", MaxPathsBytes)}
	if _, err := m.Encode(); err == nil {
		t.Error("paths over their limit encoded")
	}
	m.Paths = []string{"/" + strings.Repeat("p", MaxPathsBytes-2)}
	if b, err := m.Encode(); err != nil || len(b) > memberlist.MetaMaxSize {
		t.Errorf("paths at their limit: %d bytes, %v", len(b), err)
	}
	// Beside every other field at its limit they still fit.
	full := fullMeta()
	full.Paths = m.Paths
	if b, err := full.Encode(); err != nil || len(b) > memberlist.MetaMaxSize {
		t.Errorf("paths at their limit beside every other field at its: %d bytes, %v", len(b), err)
	}
}

// encodeLegacy writes m as a build with the legacy bounds does (metadata
// version 4, no limit checked).
func encodeLegacy(m Meta) []byte {
	w := writer{}
	m.write(&w)
	return w.buf
}

// An older node may send a longer GPU model, windows and paths: they are
// read and clipped to the current limits (the model and the windows at a
// character boundary, the paths to those that fit, in order), so what was
// decoded encodes again.
func TestMetaLegacyLimitsClipped(t *testing.T) {
	m := sampleMeta()
	m.Storage = false
	m.GPUModel = strings.Repeat("g", legacyGPUModelLen)
	m.Lending = strings.Repeat("é", legacyLendingLen/2) // two bytes each
	m.Paths = []string{"/" + strings.Repeat("a", 60), "/" + strings.Repeat("b", 60), "/c"}
	b := encodeLegacy(m)
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatalf("legacy metadata: %v", err)
	}
	if got.GPUModel != strings.Repeat("g", MaxGPUModelLen) {
		t.Errorf("model %q, want clipped to %d bytes", got.GPUModel, MaxGPUModelLen)
	}
	if got.Lending != strings.Repeat("é", MaxLendingLen/2) {
		t.Errorf("windows %q, want clipped to %d bytes at a character boundary", got.Lending, MaxLendingLen)
	}
	if !reflect.DeepEqual(got.Paths, m.Paths[:1]) {
		t.Errorf("paths %q, want the first only (the second would pass %d bytes)", got.Paths, MaxPathsBytes)
	}
	if _, err := got.Encode(); err != nil {
		t.Errorf("clipped legacy metadata does not encode: %v", err)
	}
	if c := Clip("aé", 2); c != "a" {
		t.Errorf("Clip inside a character: %q, want %q", c, "a")
	}
}
