package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// ErrMalformed is wrapped by every decoding error of bytes from the network.
var ErrMalformed = errors.New("malformed gossip data")

// writer appends the compact encoding shared by metadata, telemetry and
// push/pull state: uvarint lengths, big-endian fixed-width numbers.
type writer struct{ buf []byte }

func (w *writer) byte(b byte)      { w.buf = append(w.buf, b) }
func (w *writer) uint16(v uint16)  { w.buf = binary.BigEndian.AppendUint16(w.buf, v) }
func (w *writer) uvarint(v uint64) { w.buf = binary.AppendUvarint(w.buf, v) }
func (w *writer) varint(v int64)   { w.buf = binary.AppendVarint(w.buf, v) }
func (w *writer) float64(v float64) {
	w.buf = binary.BigEndian.AppendUint64(w.buf, math.Float64bits(v))
}
func (w *writer) string(s string) {
	w.uvarint(uint64(len(s)))
	w.buf = append(w.buf, s...)
}

// reader decodes what writer wrote. The first failure sticks in err, so
// callers check once at the end; every read is bounds-checked.
type reader struct {
	buf []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.buf) < 1 {
		r.fail("%s: truncated", what)
		return 0
	}
	b := r.buf[0]
	r.buf = r.buf[1:]
	return b
}

func (r *reader) uint16(what string) uint16 {
	if r.err != nil {
		return 0
	}
	if len(r.buf) < 2 {
		r.fail("%s: truncated", what)
		return 0
	}
	v := binary.BigEndian.Uint16(r.buf)
	r.buf = r.buf[2:]
	return v
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.fail("%s: bad varint", what)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	if n <= 0 {
		r.fail("%s: bad varint", what)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

// float64 reads a finite, non-negative number (every float we gossip is a
// rate, a load or a count).
func (r *reader) float64(what string) float64 {
	if r.err != nil {
		return 0
	}
	if len(r.buf) < 8 {
		r.fail("%s: truncated", what)
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(r.buf))
	r.buf = r.buf[8:]
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		r.fail("%s: %v is not a finite non-negative number", what, v)
		return 0
	}
	return v
}

// string reads a UTF-8 string of at most max bytes.
func (r *reader) string(what string, max int) string {
	s := string(r.bytes(what, max))
	if r.err == nil && !utf8.ValidString(s) {
		r.fail("%s: not UTF-8", what)
		return ""
	}
	return s
}

// bytes reads a length-prefixed byte string of at most max bytes (nil
// when empty).
func (r *reader) bytes(what string, max int) []byte {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if n > uint64(max) {
		r.fail("%s: length %d over the limit %d", what, n, max)
		return nil
	}
	if uint64(len(r.buf)) < n {
		r.fail("%s: truncated", what)
		return nil
	}
	if n == 0 {
		return nil
	}
	b := append([]byte(nil), r.buf[:n]...)
	r.buf = r.buf[n:]
	return b
}
