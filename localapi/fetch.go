package localapi

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// OpFetch downloads a job's outputs (and, on request, its last checkpoint)
// from a node that holds them to this machine (reclaimnet fetch).
const OpFetch = "fetch"

// More error kinds for OpFetch.
const (
	// KindPurged: the job's results were kept for their time and purged.
	KindPurged = "purged"
	// KindNoOutputs: the job has no version (yet) any node holds.
	KindNoOutputs = "no_outputs"
	// KindDiskFull: this machine's disk filled up: for OpRun the bundle
	// did not fit in the data directory and nothing was submitted.
	KindDiskFull = "disk_full"
)

// FetchRequest says what OpFetch streams: the job's outputs, and with
// Checkpoint its checkpoint files of the same version too.
type FetchRequest struct {
	Checkpoint bool `json:"checkpoint,omitempty"`
}

// FetchInfo is what OpFetch delivered.
type FetchInfo struct {
	Job     string `json:"job"`
	Version uint64 `json:"version"`
	// From is the node that served it.
	From string `json:"from"`
	// Out and CheckpointOut are where the client wrote it.
	Out           string `json:"out"`
	CheckpointOut string `json:"checkpoint_out,omitempty"`
	// Files and Bytes count the outputs' files and their bytes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Received chunks came over the network now; AlreadyHad were kept by
	// an interrupted earlier fetch to the same place.
	Received      int   `json:"received_chunks"`
	AlreadyHad    int   `json:"already_had_chunks"`
	ReceivedBytes int64 `json:"received_bytes"`
}

// The fetch stream. OpFetch is answered with frames, not one Response:
// the agent checks that the caller owns the job (or is an admin), fetches
// it over the mesh and relays the bytes; the client ('reclaimnet fetch',
// running as its caller) keeps the chunks and writes the files, so the
// agent writes nothing on the caller's behalf. A frame is a type byte, a
// 4-byte big-endian length and the payload.
const (
	// FrameOffer (agent → client): a FetchOffer; the client answers with
	// a FrameNeed. Once per connection the agent makes to the holder (a
	// broken one is resumed).
	FrameOffer byte = 'O'
	// FrameNeed (client → agent): a FetchNeed.
	FrameNeed byte = 'N'
	// FrameChunk (agent → client): a chunk's 32-byte SHA-256, then its
	// bytes, verified by the agent and again by the client.
	FrameChunk byte = 'C'
	// FrameEnd (agent → client): a FetchEnd, the last frame.
	FrameEnd byte = 'E'
)

// MaxFetchFrame bounds a fetch frame (a chunk of at most 64 MiB and its
// hash, or an offer's list).
const MaxFetchFrame = 64<<20 + 64

// ChunkRef names a chunk by its SHA-256 (hex) and size.
type ChunkRef struct {
	Hash string `json:"hash"`
	Size int64  `json:"size"`
}

// FetchOffer lists the chunks of the parts being fetched.
type FetchOffer struct {
	Chunks []ChunkRef `json:"chunks"`
}

// FetchNeed lists the offered chunks the client lacks (kept from an
// interrupted earlier fetch to the same place otherwise).
type FetchNeed struct {
	Chunks []ChunkRef `json:"chunks"`
}

// FetchEnd ends the stream: Error and Kind as in Response, or what was
// delivered and the manifest (ckpt's encoding) the client lays it out by.
type FetchEnd struct {
	Error    string     `json:"error,omitempty"`
	Kind     string     `json:"kind,omitempty"`
	Fetched  *FetchInfo `json:"fetched,omitempty"`
	Manifest []byte     `json:"manifest,omitempty"`
}

// FetchSink is the client's end of the stream.
type FetchSink interface {
	// Missing returns the refs of offer the client lacks.
	Missing(offer []ChunkRef) []ChunkRef
	// PutChunk keeps one chunk; an error ends the fetch.
	PutChunk(hash [32]byte, data []byte) error
}

// WriteFrame writes one fetch frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	hdr := make([]byte, 5, 5+len(payload))
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	_, err := w.Write(append(hdr, payload...))
	return err
}

// ReadFrame reads one fetch frame of at most limit bytes.
func ReadFrame(r io.Reader, limit int) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(limit) {
		return 0, nil, fmt.Errorf("fetch frame of %d bytes (limit %d)", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	return hdr[0], b, nil
}

// Fetch asks the agent of data dir dir for job's results and hands what
// it relays to sink until the agent's FetchEnd, which it returns. An
// error is one of the connection or the sink; the agent's refusals come
// in FetchEnd.
func Fetch(ctx context.Context, dir, job string, req FetchRequest, sink FetchSink) (FetchEnd, error) {
	conn, err := dial(ctx, dir)
	if err != nil {
		return FetchEnd{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	// No newline after the request: frames follow it on the stream.
	b, err := json.Marshal(Request{Op: OpFetch, JobID: job, Fetch: &req})
	if err == nil {
		_, err = conn.Write(b)
	}
	if err != nil {
		return FetchEnd{}, fmt.Errorf("send request: %w", err)
	}
	br := bufio.NewReader(conn)
	for {
		typ, b, err := ReadFrame(br, MaxFetchFrame)
		if err != nil {
			if ctx.Err() != nil {
				return FetchEnd{}, ctx.Err()
			}
			return FetchEnd{}, fmt.Errorf("read from agent: %w", err)
		}
		switch typ {
		case FrameOffer:
			var o FetchOffer
			if err := json.Unmarshal(b, &o); err != nil {
				return FetchEnd{}, fmt.Errorf("agent's offer: %w", err)
			}
			need, err := json.Marshal(FetchNeed{Chunks: sink.Missing(o.Chunks)})
			if err != nil {
				return FetchEnd{}, err
			}
			if err := WriteFrame(conn, FrameNeed, need); err != nil {
				return FetchEnd{}, fmt.Errorf("send need: %w", err)
			}
		case FrameChunk:
			if len(b) < 32 {
				return FetchEnd{}, errors.New("agent sent a chunk frame without a hash")
			}
			if err := sink.PutChunk([32]byte(b[:32]), b[32:]); err != nil {
				return FetchEnd{}, err
			}
		case FrameEnd:
			var e FetchEnd
			if err := json.Unmarshal(b, &e); err != nil {
				return FetchEnd{}, fmt.Errorf("agent's answer: %w", err)
			}
			return e, nil
		default:
			return FetchEnd{}, fmt.Errorf("agent sent an unknown fetch frame %q", typ)
		}
	}
}
