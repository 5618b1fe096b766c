package localapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// memSink keeps chunks in memory and already has the ones in has.
type memSink struct {
	has    map[string]bool
	offers int
	got    map[[32]byte][]byte
}

func (s *memSink) Missing(offer []ChunkRef) []ChunkRef {
	s.offers++
	var out []ChunkRef
	for _, r := range offer {
		if !s.has[r.Hash] {
			out = append(out, r)
		}
	}
	return out
}

func (s *memSink) PutChunk(h [32]byte, data []byte) error {
	s.got[h] = bytes.Clone(data)
	return nil
}

// TestFetchStream: the client's end of OpFetch against an agent that
// speaks the frames: it sends the request without a trailing newline,
// answers the offer with the chunks its sink lacks, hands the chunks to
// the sink and returns the agent's end; a frame over the limit is an
// error, not an allocation.
func TestFetchStream(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	chunks := [][]byte{[]byte("first chunk"), []byte("second chunk")}
	refs := make([]ChunkRef, len(chunks))
	for i, c := range chunks {
		h := sha256.Sum256(c)
		refs[i] = ChunkRef{Hash: hex.EncodeToString(h[:]), Size: int64(len(c))}
	}
	agentErr := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		dec := json.NewDecoder(br)
		var req Request
		if err := dec.Decode(&req); err != nil || req.Op != OpFetch || req.JobID != "j" || req.Fetch == nil || !req.Fetch.Checkpoint {
			agentErr <- fmt.Sprintf("request %+v (%v)", req, err)
			return
		}
		if rest, _ := bufio.NewReader(dec.Buffered()).Peek(1); len(rest) > 0 {
			agentErr <- "bytes after the request: " + string(rest)
			return
		}
		offer, _ := json.Marshal(FetchOffer{Chunks: refs})
		WriteFrame(conn, FrameOffer, offer)
		typ, b, err := ReadFrame(br, len(offer)+1024)
		var need FetchNeed
		if err != nil || typ != FrameNeed || json.Unmarshal(b, &need) != nil || len(need.Chunks) != 1 || need.Chunks[0] != refs[1] {
			agentErr <- "need " + string(b)
			return
		}
		h := sha256.Sum256(chunks[1])
		WriteFrame(conn, FrameChunk, append(h[:], chunks[1]...))
		end, _ := json.Marshal(FetchEnd{Fetched: &FetchInfo{Job: "j", Version: 3}, Manifest: []byte("m")})
		WriteFrame(conn, FrameEnd, end)
		agentErr <- ""
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink := &memSink{has: map[string]bool{refs[0].Hash: true}, got: map[[32]byte][]byte{}}
	end, err := Fetch(ctx, dir, "j", FetchRequest{Checkpoint: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if msg := <-agentErr; msg != "" {
		t.Fatal(msg)
	}
	if end.Fetched == nil || end.Fetched.Version != 3 || string(end.Manifest) != "m" || sink.offers != 1 ||
		len(sink.got) != 1 || string(sink.got[sha256.Sum256(chunks[1])]) != "second chunk" {
		t.Errorf("end %+v, sink %+v: want version 3, one offer, the second chunk only", end, sink)
	}

	var frame bytes.Buffer
	WriteFrame(&frame, FrameNeed, []byte(strings.Repeat("x", 100)))
	if _, _, err := ReadFrame(bytes.NewReader(frame.Bytes()), 99); err == nil || !strings.Contains(err.Error(), "limit 99") {
		t.Errorf("a 100-byte frame under a limit of 99: %v", err)
	}
}

// FuzzReadFrame: any bytes give a frame within the limit or an error.
func FuzzReadFrame(f *testing.F) {
	var ok bytes.Buffer
	WriteFrame(&ok, FrameChunk, []byte("payload"))
	f.Add(ok.Bytes())
	f.Add([]byte{FrameEnd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{FrameNeed, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, p, err := ReadFrame(bytes.NewReader(b), 1024)
		if err != nil {
			return
		}
		if len(p) > 1024 || len(b) < 5+len(p) || typ != b[0] || !bytes.Equal(p, b[5:5+len(p)]) {
			t.Fatalf("frame %q %q from %q", typ, p, b)
		}
	})
}
