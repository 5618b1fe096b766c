package transfer

import (
	"fmt"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/reclaimnet/reclaimnet/ckpt"
)

// Compression selects how the sender encodes chunks.
type Compression uint8

const (
	// CompressAuto: zstd fastest, with the byte-plane shuffle where a sample
	// shows it compresses better; raw where a sample does not shrink.
	CompressAuto Compression = iota
	// CompressZstd: zstd fastest without the shuffle (raw if no gain).
	CompressZstd
	// CompressOff: every chunk raw.
	CompressOff
)

const (
	// probeEvery: one chunk in probeEvery is compressed every way to pick
	// the encoding for the chunks after it. (Sampling part of a chunk does
	// not work for the shuffle: zstd's 128 KiB blocks must each hold one
	// byte plane to compress it, so only whole shuffled chunks tell.)
	probeEvery = 16
	// maxProbeEvery: while probes keep choosing raw (incompressible data,
	// e.g. already compressed or random), the interval doubles up to this,
	// so such a transfer spends about 1.6 % instead of 6 % of its chunks on
	// futile compression, and data that turns compressible is noticed within
	// 64 chunks.
	maxProbeEvery = 64
	// minGain: a chunk must shrink below this fraction to be sent
	// compressed (zstd on random bytes costs the receiver CPU for nothing).
	minGain = 0.97
)

// chooser remembers which encoding recent chunks of one transfer liked.
type chooser struct {
	n         atomic.Int64
	choice    atomic.Int32 // encoding + 1; 0 = probe next
	nextProbe atomic.Int64 // chunk number of the next probe; 0 = at probeEvery
	interval  atomic.Int64 // current probe interval; 0 = probeEvery
}

// probeDue reports whether chunk number n (from 1) is probed.
func (ch *chooser) probeDue(n int64) bool {
	next := ch.nextProbe.Load()
	if next == 0 {
		return n%probeEvery == 1
	}
	return n >= next
}

// probed records the choice a probe made at chunk n: raw doubles the
// interval to the next probe (up to maxProbeEvery), a compression resets it.
func (ch *chooser) probed(n int64, best uint8) {
	iv := max(ch.interval.Load(), probeEvery)
	if best == encRaw {
		iv = min(2*iv, maxProbeEvery)
	} else {
		iv = probeEvery
	}
	ch.interval.Store(iv)
	ch.nextProbe.Store(n + iv)
	ch.choice.Store(int32(best) + 1)
}

// shuffle4 writes the byte planes of src (as 4-byte elements) into dst:
// all first bytes, then all second bytes, ...; a tail of len%4 bytes is
// copied unchanged. dst must have len(src).
func shuffle4(dst, src []byte) {
	n := len(src) / 4
	for i := 0; i < n; i++ {
		dst[i] = src[4*i]
		dst[n+i] = src[4*i+1]
		dst[2*n+i] = src[4*i+2]
		dst[3*n+i] = src[4*i+3]
	}
	copy(dst[4*n:], src[4*n:])
}

// unshuffle4 inverts shuffle4.
func unshuffle4(dst, src []byte) {
	n := len(src) / 4
	for i := 0; i < n; i++ {
		dst[4*i] = src[i]
		dst[4*i+1] = src[n+i]
		dst[4*i+2] = src[2*n+i]
		dst[4*i+3] = src[3*n+i]
	}
	copy(dst[4*n:], src[4*n:])
}

// codec compresses and decompresses chunks; safe for concurrent use.
type codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

func newCodec(concurrency int) (*codec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(concurrency), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(concurrency),
		zstd.WithDecoderMaxMemory(ckpt.MaxChunkSize), zstd.WithDecoderMaxWindow(ckpt.MaxChunkSize))
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &codec{enc: enc, dec: dec}, nil
}

func (c *codec) Close() {
	c.enc.Close()
	c.dec.Close()
}

// encode returns the encoding and payload for raw under mode, using ch to
// probe only now and then. dst is reused for the payload when large enough.
func (c *codec) encode(mode Compression, raw, dst []byte, ch *chooser) (uint8, []byte) {
	if mode == CompressOff || len(raw) < 1024 {
		return encRaw, raw
	}
	limit := int(minGain * float64(len(raw)))
	choice := int(ch.choice.Load()) - 1
	if n := ch.n.Add(1); ch.probeDue(n) || choice < 0 {
		return c.probe(mode, raw, dst, ch, limit, n)
	}
	var out []byte
	switch uint8(choice) {
	case encRaw:
		return encRaw, raw
	case encShuffle:
		sh := make([]byte, len(raw))
		shuffle4(sh, raw)
		out = c.enc.EncodeAll(sh, dst[:0])
	default:
		out = c.enc.EncodeAll(raw, dst[:0])
	}
	if len(out) > limit {
		// The data changed character: probe the next chunk afresh.
		ch.interval.Store(0)
		ch.choice.Store(0)
		return encRaw, raw
	}
	return uint8(choice), out
}

// probe compresses raw every way mode allows and keeps the best.
func (c *codec) probe(mode Compression, raw, dst []byte, ch *chooser, limit int, n int64) (uint8, []byte) {
	best, out := encRaw, raw
	if z := c.enc.EncodeAll(raw, dst[:0]); len(z) <= limit {
		best, out = encZstd, z
	}
	if mode == CompressAuto {
		sh := make([]byte, len(raw))
		shuffle4(sh, raw)
		if z := c.enc.EncodeAll(sh, nil); len(z) <= limit && len(z) < len(out) {
			best, out = encShuffle, z
		}
	}
	ch.probed(n, best)
	return best, out
}

// decode returns the raw bytes of an encoded chunk of rawSize bytes.
func (c *codec) decode(enc uint8, data []byte, rawSize int) ([]byte, error) {
	switch enc {
	case encRaw:
		return data, nil
	case encZstd, encShuffle:
		out, err := c.dec.DecodeAll(data, make([]byte, 0, rawSize))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		if len(out) != rawSize {
			return nil, fmt.Errorf("decoded %d bytes, want %d", len(out), rawSize)
		}
		if enc == encShuffle {
			raw := make([]byte, rawSize)
			unshuffle4(raw, out)
			return raw, nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown encoding %d", enc)
}
