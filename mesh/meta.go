package mesh

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// MetaVersion is the metadata encoding this build writes. A decoder reads
// the fields it knows from any version ≥ 1 and ignores fields appended by a
// newer version, so nodes can be upgraded one by one. Version 2 appends
// the lending fields, version 3 a flags byte (metaStorage), the lab and
// the pool, version 4 the read-only paths.
const MetaVersion = 4

// metaStorage is the flag of a storage-role node.
const metaStorage = 1 << 0

// Limits on metadata fields. They are chosen so that a Meta with every
// field at its limit encodes to maxMetaBytes, within memberlist's
// MetaMaxSize (512 bytes): a node's metadata always fits, whatever its
// name, windows and paths (the agent clips the windows and the GPU model
// to their limits, and refuses read-only paths over theirs at start).
const (
	MaxNodeNameLen = 128
	MaxBuildingLen = 64
	MaxGPUModelLen = 48
	// MaxLendingLen bounds the lending windows' description (version 2),
	// a display string the agent clips to it.
	MaxLendingLen = 72
	// MaxOutlookLen bounds the encoded lending outlook (version 2).
	MaxOutlookLen = 32
	// MaxDomainLen bounds Lab and Pool (version 3).
	MaxDomainLen = 16
	// MaxPathsBytes bounds a node's read-only paths together (each
	// path's bytes plus one; version 4).
	MaxPathsBytes = 100
)

// maxMetaBytes is the longest encoding the limits allow: each string's
// length prefix (one byte below 128, two from there) and bytes, the fixed
// fields (ports 2+2+2, role 1, GPU count 2, VRAM a uvarint ≤ 5, capability
// 1, start time a varint ≤ 6 within ±maxStartUnix, flags 1) and the path
// count (one byte: at most MaxPathsBytes < 128 paths).
const maxMetaBytes = 1 + // version
	2 + MaxNodeNameLen + 1 + MaxBuildingLen +
	6 + 1 + 2 + 1 + MaxGPUModelLen + 5 + 1 + 6 +
	1 + MaxLendingLen + 1 + MaxOutlookLen +
	1 + 1 + MaxDomainLen + 1 + MaxDomainLen +
	1 + MaxPathsBytes

// The limits fit memberlist's cap (this fails to compile otherwise).
var _ [memberlist.MetaMaxSize - maxMetaBytes]struct{}

// Bounds the decoder accepts for the GPU model, the windows and the paths:
// those of builds that allow longer fields (and do not fit every field at
// its limit). It clips what it reads to the limits above (legacyClip), so
// a mixed cluster keeps reading every node.
const (
	legacyGPUModelLen = 64
	legacyLendingLen  = 160
	legacyPathsBytes  = 200
)

// maxStartUnix bounds the start time both ways, so a hostile value cannot
// overflow time arithmetic and the varint stays within 6 bytes.
const maxStartUnix = 1 << 40

// Role says what part of the control plane a node may take.
type Role uint8

const (
	// RoleVoterEligible nodes may be chosen as Raft voters (the default).
	RoleVoterEligible Role = iota
	// RoleNonVoter nodes replicate the Raft log but never vote.
	RoleNonVoter
)

func (r Role) String() string {
	switch r {
	case RoleVoterEligible:
		return "voter-eligible"
	case RoleNonVoter:
		return "non-voter"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Meta is what every member carries in its memberlist metadata: who it is
// and how to reach its other services. It changes rarely (a node
// re-announces it with Mesh.UpdateMeta).
type Meta struct {
	// ID is the node's name (equal to its memberlist name).
	ID       string
	Building string
	// Ports of the node's other services on its advertised address.
	RaftPort, TransferPort, HTTPPort uint16
	Role                             Role
	// GPU summary: how many, which model, VRAM per GPU in MiB, CUDA
	// compute capability (8.6 is stored as 86).
	GPUs          uint16
	GPUModel      string
	GPUVRAMMiB    uint32
	GPUCapability uint8
	// Started is when the agent started (uptime counts toward voter choice).
	Started time.Time
	// Lending describes the owner's lending windows ("Mon-Fri 19:00-08:00;
	// Sat,Sun (Europe/Berlin)"; version 2), for the members list and the
	// page.
	Lending string
	// Outlook is the node's known future as its owner policy sees it: an
	// encoded owner.Outlook (lent until when, or lendable again from
	// when; version 2). Empty: none published.
	Outlook []byte
	// Storage is set on a storage-role node (reclaimnet agent --role
	// storage, version 3): it keeps checkpoints, hosts no jobs and is
	// never lent or reclaimed. Older nodes are not storage nodes.
	Storage bool
	// Lab and Pool name failure domains the node shares with others
	// besides its building (a lab's room, a spot pool, a power circuit;
	// version 3): the priors of which nodes leave together. Empty: none.
	Lab, Pool string
	// Paths are the host paths the node's owner lets guest jobs read (and
	// that exist there): a job that declares a path (run --ro-path) runs
	// only on a node one of whose Paths holds it. Version 4.
	Paths []string
}

// Encode returns the compact encoding of m, or an error if a string is
// over its limit (so memberlist never sees more than MetaMaxSize bytes).
func (m Meta) Encode() ([]byte, error) {
	switch {
	case len(m.ID) == 0 || len(m.ID) > MaxNodeNameLen:
		return nil, fmt.Errorf("node name %q: want 1 to %d bytes", m.ID, MaxNodeNameLen)
	case len(m.Building) > MaxBuildingLen:
		return nil, fmt.Errorf("building %q: longer than %d bytes", m.Building, MaxBuildingLen)
	case len(m.GPUModel) > MaxGPUModelLen:
		return nil, fmt.Errorf("gpu model %q: longer than %d bytes", m.GPUModel, MaxGPUModelLen)
	case len(m.Lending) > MaxLendingLen:
		return nil, fmt.Errorf("lending windows %q: longer than %d bytes", m.Lending, MaxLendingLen)
	case len(m.Outlook) > MaxOutlookLen:
		return nil, fmt.Errorf("lending outlook of %d bytes: longer than %d", len(m.Outlook), MaxOutlookLen)
	case len(m.Lab) > MaxDomainLen || len(m.Pool) > MaxDomainLen:
		return nil, fmt.Errorf("lab %q or pool %q: longer than %d bytes", m.Lab, m.Pool, MaxDomainLen)
	case m.Started.Unix() < -maxStartUnix || m.Started.Unix() > maxStartUnix:
		return nil, fmt.Errorf("start time %v: out of range", m.Started)
	}
	paths := 0
	for _, p := range m.Paths {
		paths += len(p) + 1
	}
	if paths > MaxPathsBytes {
		return nil, fmt.Errorf("read-only paths %q: %d bytes, over the %d gossip metadata has room for", m.Paths, paths, MaxPathsBytes)
	}
	w := writer{buf: make([]byte, 0, 64)}
	m.write(&w)
	if len(w.buf) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("node metadata is %d bytes, over memberlist's %d", len(w.buf), memberlist.MetaMaxSize)
	}
	return w.buf, nil
}

// write appends m's fields, unchecked, in the current version's layout.
func (m Meta) write(w *writer) {
	w.byte(MetaVersion)
	w.string(m.ID)
	w.string(m.Building)
	w.uint16(m.RaftPort)
	w.uint16(m.TransferPort)
	w.uint16(m.HTTPPort)
	w.byte(byte(m.Role))
	w.uint16(m.GPUs)
	w.string(m.GPUModel)
	w.uvarint(uint64(m.GPUVRAMMiB))
	w.byte(m.GPUCapability)
	w.varint(m.Started.Unix())
	w.string(m.Lending)
	w.string(string(m.Outlook))
	var flags byte
	if m.Storage {
		flags |= metaStorage
	}
	w.byte(flags)
	w.string(m.Lab)
	w.string(m.Pool)
	w.uvarint(uint64(len(m.Paths)))
	for _, p := range m.Paths {
		w.string(p)
	}
}

// DecodeMeta parses metadata received from a peer. Malformed input returns
// an error wrapping ErrMalformed.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) > memberlist.MetaMaxSize {
		return Meta{}, fmt.Errorf("%w: metadata of %d bytes", ErrMalformed, len(b))
	}
	r := reader{buf: b}
	v := r.byte("version")
	if r.err == nil && v == 0 {
		r.fail("metadata version 0")
	}
	var m Meta
	m.ID = r.string("node name", MaxNodeNameLen)
	m.Building = r.string("building", MaxBuildingLen)
	m.RaftPort = r.uint16("raft port")
	m.TransferPort = r.uint16("transfer port")
	m.HTTPPort = r.uint16("http port")
	m.Role = Role(r.byte("role"))
	m.GPUs = r.uint16("gpu count")
	m.GPUModel = r.string("gpu model", legacyGPUModelLen)
	vram := r.uvarint("gpu vram")
	m.GPUCapability = r.byte("gpu capability")
	started := r.varint("start time")
	if v >= 2 {
		m.Lending = r.string("lending windows", legacyLendingLen)
		m.Outlook = r.bytes("lending outlook", MaxOutlookLen)
	}
	var flags byte
	if v >= 3 {
		flags = r.byte("flags")
		m.Lab = r.string("lab", MaxDomainLen)
		m.Pool = r.string("pool", MaxDomainLen)
	}
	if v >= 4 {
		n := r.uvarint("path count")
		if n > legacyPathsBytes {
			r.fail("path count %d over the limit", n)
		}
		total := 0
		for i := uint64(0); i < n && r.err == nil; i++ {
			p := r.string("path", legacyPathsBytes)
			if total += len(p) + 1; total > legacyPathsBytes {
				r.fail("paths: over %d bytes", legacyPathsBytes)
			}
			m.Paths = append(m.Paths, p)
		}
	}
	if r.err != nil {
		return Meta{}, r.err
	}
	if v == MetaVersion && flags&^metaStorage != 0 {
		return Meta{}, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	}
	m.Storage = flags&metaStorage != 0
	if vram > 1<<32-1 {
		return Meta{}, fmt.Errorf("%w: gpu vram %d MiB", ErrMalformed, vram)
	}
	if m.Role > RoleNonVoter {
		return Meta{}, fmt.Errorf("%w: unknown role %d", ErrMalformed, m.Role)
	}
	if len(m.ID) == 0 {
		return Meta{}, fmt.Errorf("%w: empty node name", ErrMalformed)
	}
	if v <= MetaVersion && len(r.buf) != 0 {
		return Meta{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.buf))
	}
	m.GPUVRAMMiB = uint32(vram)
	if started < -maxStartUnix || started > maxStartUnix {
		return Meta{}, fmt.Errorf("%w: start time %d", ErrMalformed, started)
	}
	m.Started = time.Unix(started, 0)
	legacyClip(&m)
	return m, nil
}

// legacyClip cuts what an older peer may send beyond the current limits:
// the GPU model and the windows (display strings) to their limits, and
// the read-only paths to those that fit in MaxPathsBytes, in order (a
// dropped path only keeps the node out of the jobs that need it). What
// was decoded then always encodes again.
func legacyClip(m *Meta) {
	m.GPUModel = Clip(m.GPUModel, MaxGPUModelLen)
	m.Lending = Clip(m.Lending, MaxLendingLen)
	total := 0
	for i, p := range m.Paths {
		if total += len(p) + 1; total > MaxPathsBytes {
			m.Paths = m.Paths[:i]
			break
		}
	}
}

// Clip returns s cut to at most n bytes, at a UTF-8 character boundary.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
