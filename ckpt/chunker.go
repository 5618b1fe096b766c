package ckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// Chunker cuts a byte stream into content-defined chunks (FastCDC with
// normalized chunking, level 1): boundaries depend only on the bytes of a
// 64-byte window, so an insertion shifts boundaries only nearby.
type Chunker struct {
	// Min is the smallest chunk (except the last of a stream).
	Min int
	// Avg is the target average; a power of two.
	Avg int
	// Max is the largest chunk; at most MaxChunkSize.
	Max int
}

// DefaultChunker has min 128 KiB, average 512 KiB, max 2 MiB. torch.save
// orders tensor storages by their key as a string (0, 1, 10, 11, ..., 2, 20,
// ...), so a frozen block of tensors comes out interleaved with changed ones;
// on 1 MiB tensors, 1 MiB chunks re-sent 32 % more than the changed bytes,
// 512 KiB chunks 17 %. A 48 GB checkpoint is then about 96 000 chunks (a
// manifest of about 8 MB).
var DefaultChunker = Chunker{Min: 128 << 10, Avg: 512 << 10, Max: 2 << 20}

// Validate checks the parameters.
func (c Chunker) Validate() error {
	if c.Min < 64 || c.Avg <= c.Min || c.Max <= c.Avg || c.Max > MaxChunkSize {
		return fmt.Errorf("chunker: want 64 <= min < avg < max <= %d, got %d/%d/%d", MaxChunkSize, c.Min, c.Avg, c.Max)
	}
	if c.Avg&(c.Avg-1) != 0 {
		return fmt.Errorf("chunker: average %d is not a power of two", c.Avg)
	}
	return nil
}

// gear is the rolling hash table: 256 pseudo-random words derived from
// SHA-256 so every build and every node cuts at the same places.
var gear = func() (t [256]uint64) {
	for i := range t {
		s := sha256.Sum256([]byte{'g', 'e', 'a', 'r', byte(i)})
		t[i] = binary.LittleEndian.Uint64(s[:8])
	}
	return t
}()

// ncLevel is FastCDC's normalization level. Level 1 rather than the
// paper's 2: with 2, a cut depends more on the distance from the previous
// cut, so after an insertion the two versions' cut points took about four
// chunks to fall back into step on a torch.save file (level 1: about one).
const ncLevel = 1

// masks returns the harder (before Avg) and easier (after Avg) masks. The hash
// is updated as h = h<<1 + gear[b], so its top bits depend on the last 64
// bytes; the masks test top bits.
func (c Chunker) masks() (small, large uint64) {
	b := bits.TrailingZeros(uint(c.Avg))
	small = ^uint64(0) << (64 - (b + ncLevel))
	large = ^uint64(0) << (64 - (b - ncLevel))
	return small, large
}

// Cut returns the length of the first chunk of data. If data holds less than
// Max bytes and no boundary is found, it returns len(data): callers at the end
// of a stream take it as the last chunk, others read more first.
func (c Chunker) Cut(data []byte) int {
	n := len(data)
	if n <= c.Min {
		return n
	}
	if n > c.Max {
		n = c.Max
	}
	normal := c.Avg
	if normal > n {
		normal = n
	}
	small, large := c.masks()
	var h uint64
	i := c.Min
	for ; i < normal; i++ {
		h = h<<1 + gear[data[i]]
		if h&small == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		h = h<<1 + gear[data[i]]
		if h&large == 0 {
			return i + 1
		}
	}
	return n
}

// Split reads r to the end and calls fn with each chunk in order. The slice
// passed to fn is reused after fn returns.
func (c Chunker) Split(r io.Reader, fn func(chunk []byte) error) error {
	if err := c.Validate(); err != nil {
		return err
	}
	buf := make([]byte, 2*c.Max)
	start, end := 0, 0
	eof := false
	for {
		// Keep at least Max bytes buffered unless the stream ended, so a cut
		// at len(data) only happens at Max or at the end.
		for !eof && end-start < c.Max {
			if start > 0 {
				copy(buf, buf[start:end])
				end -= start
				start = 0
			}
			n, err := r.Read(buf[end:])
			end += n
			if errors.Is(err, io.EOF) {
				eof = true
			} else if err != nil {
				return fmt.Errorf("read: %w", err)
			}
		}
		if start == end {
			return nil
		}
		n := c.Cut(buf[start:end])
		if err := fn(buf[start : start+n]); err != nil {
			return err
		}
		start += n
	}
}
