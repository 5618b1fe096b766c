package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
)

// ALPN is the protocol name negotiated in TLS; it carries the wire version.
const ALPN = "reclaimnet-transfer/1"

// protoVersion is the version byte in OFFER.
const protoVersion = 1

type frameType uint8

const (
	frameOffer frameType = 0x01
	frameNeed  frameType = 0x02
	frameDone  frameType = 0x03
	frameFail  frameType = 0x04
	frameChunk frameType = 0x05
	// A fetch: the requester asks for a job's outputs, the holder answers
	// with the manifest it serves.
	frameFetch    frameType = 0x06
	frameManifest frameType = 0x07
)

func (t frameType) String() string {
	switch t {
	case frameOffer:
		return "OFFER"
	case frameNeed:
		return "NEED"
	case frameDone:
		return "DONE"
	case frameFail:
		return "FAIL"
	case frameChunk:
		return "CHUNK"
	case frameFetch:
		return "FETCH"
	case frameManifest:
		return "MANIFEST"
	}
	return fmt.Sprintf("frame(%#x)", uint8(t))
}

const (
	frameHeaderLen = 5
	// maxControlFrame bounds OFFER/NEED/DONE/FAIL payloads (a manifest of a
	// 48 GB checkpoint is about 5 MB).
	maxControlFrame = 32 << 20
	chunkHeaderLen  = 32 + 4 + 1
	// maxChunkFrame bounds a CHUNK payload: header plus the largest chunk
	// plus zstd's worst-case expansion.
	maxChunkFrame = chunkHeaderLen + ckpt.MaxChunkSize + ckpt.MaxChunkSize/128 + 1024
)

// ErrProtocol is wrapped by every malformed-frame error.
var ErrProtocol = errors.New("transfer protocol error")

// chunk encodings.
const (
	encRaw     uint8 = 0
	encZstd    uint8 = 1
	encShuffle uint8 = 2 // zstd of the 4-byte byte-plane shuffle
)

// failure codes in FAIL.
type failCode uint8

const (
	failRefused  failCode = 1
	failQuota    failCode = 2
	failDiskFull failCode = 3
	failBad      failCode = 4
	failCorrupt  failCode = 5
	failInternal failCode = 6
	failUnknown  failCode = 7 // fetch: no version of the job here
	failPurged   failCode = 8 // fetch: the job's last version was purged
)

type frame struct {
	typ     frameType
	payload []byte
}

func appendFrameHeader(b []byte, t frameType, n int) []byte {
	b = append(b, byte(t))
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

func writeFrame(w io.Writer, t frameType, payload []byte) error {
	b := appendFrameHeader(make([]byte, 0, frameHeaderLen+len(payload)), t, len(payload))
	b = append(b, payload...)
	_, err := w.Write(b)
	return err
}

// readFrame reads one frame, refusing payloads longer than max.
func readFrame(r io.Reader, max int) (frame, error) {
	return readFrameInto(r, max, nil)
}

// readFrameInto is readFrame with the payload read into buf when it is
// large enough (a data stream reuses one buffer for every chunk instead of
// allocating and zeroing half a megabyte per chunk).
func readFrameInto(r io.Reader, max int, buf []byte) (frame, error) {
	var h [frameHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	f := frame{typ: frameType(h[0])}
	n := binary.BigEndian.Uint32(h[1:])
	if uint64(n) > uint64(max) {
		return frame{}, fmt.Errorf("%w: %v frame of %d bytes, max %d", ErrProtocol, f.typ, n, max)
	}
	if int(n) <= cap(buf) {
		f.payload = buf[:n]
	} else {
		f.payload = make([]byte, n)
	}
	if _, err := io.ReadFull(r, f.payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, fmt.Errorf("%w: %v frame truncated: %w", ErrProtocol, f.typ, err)
	}
	return f, nil
}

type offer struct {
	class    policy.TrafficClass
	manifest *ckpt.Manifest
}

func encodeOffer(class policy.TrafficClass, m *ckpt.Manifest) []byte {
	return append([]byte{protoVersion, byte(class)}, m.Encode()...)
}

func parseOffer(p []byte) (offer, error) {
	if len(p) < 2 {
		return offer{}, fmt.Errorf("%w: OFFER of %d bytes", ErrProtocol, len(p))
	}
	if p[0] != protoVersion {
		return offer{}, fmt.Errorf("%w: protocol version %d, want %d", ErrProtocol, p[0], protoVersion)
	}
	class := policy.TrafficClass(p[1])
	if class > policy.ClassPresync {
		return offer{}, fmt.Errorf("%w: unknown traffic class %d", ErrProtocol, p[1])
	}
	m, err := ckpt.ParseManifest(p[2:])
	if err != nil {
		return offer{}, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return offer{class: class, manifest: m}, nil
}

func encodeHashes(hs []ckpt.Hash) []byte {
	b := make([]byte, 0, 32*len(hs))
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b
}

func parseHashes(p []byte) ([]ckpt.Hash, error) {
	if len(p)%32 != 0 {
		return nil, fmt.Errorf("%w: hash list of %d bytes", ErrProtocol, len(p))
	}
	hs := make([]ckpt.Hash, len(p)/32)
	for i := range hs {
		copy(hs[i][:], p[32*i:])
	}
	return hs, nil
}

type failure struct {
	code failCode
	msg  string
}

func encodeFail(code failCode, msg string) []byte {
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return append([]byte{byte(code)}, msg...)
}

func parseFail(p []byte) (failure, error) {
	if len(p) < 1 || len(p) > 1025 {
		return failure{}, fmt.Errorf("%w: FAIL of %d bytes", ErrProtocol, len(p))
	}
	return failure{code: failCode(p[0]), msg: string(p[1:])}, nil
}

// chunkFrame is a decoded CHUNK payload (data still encoded).
type chunkFrame struct {
	hash    ckpt.Hash
	rawSize int
	enc     uint8
	data    []byte
}

func parseChunk(p []byte) (chunkFrame, error) {
	if len(p) < chunkHeaderLen {
		return chunkFrame{}, fmt.Errorf("%w: CHUNK of %d bytes", ErrProtocol, len(p))
	}
	var c chunkFrame
	copy(c.hash[:], p)
	c.rawSize = int(binary.BigEndian.Uint32(p[32:]))
	c.enc = p[36]
	c.data = p[chunkHeaderLen:]
	if c.rawSize <= 0 || c.rawSize > ckpt.MaxChunkSize {
		return chunkFrame{}, fmt.Errorf("%w: chunk size %d outside 1..%d", ErrProtocol, c.rawSize, ckpt.MaxChunkSize)
	}
	if c.enc > encShuffle {
		return chunkFrame{}, fmt.Errorf("%w: chunk encoding %d", ErrProtocol, c.enc)
	}
	if c.enc == encRaw && len(c.data) != c.rawSize {
		return chunkFrame{}, fmt.Errorf("%w: raw chunk of %d bytes, header says %d", ErrProtocol, len(c.data), c.rawSize)
	}
	return c, nil
}

func appendChunkHeader(b []byte, h ckpt.Hash, rawSize int, enc uint8) []byte {
	b = append(b, h[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(rawSize))
	return append(b, enc)
}

// fetchWithCheckpoint is the FETCH flag that asks for the checkpoint files
// too.
const fetchWithCheckpoint = 1

type fetchReq struct {
	job        string
	checkpoint bool
}

func encodeFetch(job string, checkpoint bool) []byte {
	var flags byte
	if checkpoint {
		flags |= fetchWithCheckpoint
	}
	return append([]byte{protoVersion, flags}, job...)
}

func parseFetch(p []byte) (fetchReq, error) {
	if len(p) < 2 {
		return fetchReq{}, fmt.Errorf("%w: FETCH of %d bytes", ErrProtocol, len(p))
	}
	if p[0] != protoVersion {
		return fetchReq{}, fmt.Errorf("%w: protocol version %d, want %d", ErrProtocol, p[0], protoVersion)
	}
	if p[1]&^fetchWithCheckpoint != 0 {
		return fetchReq{}, fmt.Errorf("%w: unknown FETCH flags %#x", ErrProtocol, p[1])
	}
	job := string(p[2:])
	if err := ckpt.ValidJobID(job); err != nil {
		return fetchReq{}, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return fetchReq{job: job, checkpoint: p[1]&fetchWithCheckpoint != 0}, nil
}
