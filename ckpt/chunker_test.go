package ckpt

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

var testChunker = Chunker{Min: 4 << 10, Avg: 16 << 10, Max: 64 << 10}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func split(t *testing.T, c Chunker, data []byte) [][]byte {
	t.Helper()
	var out [][]byte
	err := c.Split(bytes.NewReader(data), func(ch []byte) error {
		out = append(out, append([]byte(nil), ch...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChunkerBoundsAndConcat(t *testing.T) {
	for _, c := range []Chunker{testChunker, DefaultChunker} {
		data := randBytes(1, 12*c.Avg+123)
		chunks := split(t, c, data)
		if got := bytes.Join(chunks, nil); !bytes.Equal(got, data) {
			t.Fatal("chunks do not concatenate to the input")
		}
		for i, ch := range chunks {
			if len(ch) > c.Max || (i < len(chunks)-1 && len(ch) < c.Min) {
				t.Errorf("chunk %d: size %d outside [%d,%d]", i, len(ch), c.Min, c.Max)
			}
		}
		avg := len(data) / len(chunks)
		if avg < c.Avg/2 || avg > c.Avg*2 {
			t.Errorf("average chunk %d, want within 2x of %d", avg, c.Avg)
		}
	}
}

// An insertion shifts every later offset; content-defined chunking must still
// reuse all but the chunks around the edit.
func TestChunkerInsertionIsLocal(t *testing.T) {
	data := randBytes(2, 4<<20)
	edited := append(append(append([]byte(nil), data[:1<<20]...), []byte("inserted bytes!")...), data[1<<20:]...)
	a, b := split(t, testChunker, data), split(t, testChunker, edited)
	have := map[Hash]bool{}
	for _, ch := range a {
		have[Sum(ch)] = true
	}
	newChunks := 0
	for _, ch := range b {
		if !have[Sum(ch)] {
			newChunks++
		}
	}
	if newChunks > 3 {
		t.Fatalf("chunks changed by a 15-byte insertion: got %d of %d, want <= 3", newChunks, len(b))
	}
	if newChunks == 0 {
		t.Fatal("no chunk changed: the edit was not seen")
	}
}

func TestChunkerDeterministicAcrossReads(t *testing.T) {
	data := randBytes(3, 1<<20)
	a := split(t, testChunker, data)
	// A reader that returns one byte at a time must cut at the same places.
	var b [][]byte
	err := testChunker.Split(oneByteReader{bytes.NewReader(data)}, func(ch []byte) error {
		b = append(b, append([]byte(nil), ch...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("chunk count: got %d, want %d", len(b), len(a))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("chunk %d differs", i)
		}
	}
}

type oneByteReader struct{ r *bytes.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

func BenchmarkChunker(b *testing.B) {
	data := randBytes(4, 64<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		DefaultChunker.Split(bytes.NewReader(data), func([]byte) error { return nil })
	}
}
