package ofp13

import (
	"encoding/binary"
	"fmt"
)

// decoder reads big-endian fields from a slice and checks the length before
// every read. The first failure sticks: later reads return zero values and
// the caller checks err once at the end.
type decoder struct {
	buf  []byte
	off  int
	base int // offset of buf[0] within the whole message, for errors
	what string
	err  error
}

func newDecoder(buf []byte, base int, what string) *decoder {
	return &decoder{buf: buf, base: base, what: what}
}

func (d *decoder) fail(kind error, format string, args ...any) {
	if d.err == nil {
		d.err = &DecodeError{What: d.what, Offset: d.base + d.off, Err: kind, Detail: fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) remaining() int { return len(d.buf) - d.off }

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || d.remaining() < n {
		d.fail(ErrTruncated, "need %d bytes, have %d", n, d.remaining())
		return false
	}
	return true
}

func (d *decoder) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.buf[d.off]
	d.off++
	return v
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.buf[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.buf[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return v
}

func (d *decoder) skip(n int) {
	if d.need(n) {
		d.off += n
	}
}

// bytes returns a copy, so decoded messages never alias the input buffer.
func (d *decoder) bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	v := make([]byte, n)
	copy(v, d.buf[d.off:])
	d.off += n
	return v
}

// rest returns a copy of everything left; nil when nothing is left.
func (d *decoder) rest() []byte {
	if d.err != nil || d.remaining() == 0 {
		return nil
	}
	return d.bytes(d.remaining())
}

// str reads a NUL-padded fixed-size string field.
func (d *decoder) str(n int) string {
	if !d.need(n) {
		return ""
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// sub carves the next n bytes into a decoder of their own, so a structure
// with a length field cannot read past it.
func (d *decoder) sub(n int, what string) *decoder {
	if !d.need(n) {
		s := &decoder{what: what, err: d.err}
		return s
	}
	s := &decoder{buf: d.buf[d.off : d.off+n], base: d.base + d.off, what: what}
	d.off += n
	return s
}

// end fails with ErrTrailingData if anything is left.
func (d *decoder) end() {
	if d.err == nil && d.remaining() != 0 {
		d.fail(ErrTrailingData, "%d bytes", d.remaining())
	}
}

// adopt takes over the first error of a nested decoder.
func (d *decoder) adopt(s *decoder) {
	if d.err == nil && s.err != nil {
		d.err = s.err
	}
}

func appendU16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func appendZeros(b []byte, n int) []byte {
	for range n {
		b = append(b, 0)
	}
	return b
}

func putU16(b []byte, v uint16) { binary.BigEndian.PutUint16(b, v) }

// appendStr writes s NUL-padded into an n-byte field.
func appendStr(b []byte, s string, n int, field string) ([]byte, error) {
	if len(s) > n {
		return b, encodeErrorf("%s %q is longer than %d bytes", field, s, n)
	}
	b = append(b, s...)
	return appendZeros(b, n-len(s)), nil
}

// pad8 is how many bytes bring n to a multiple of 8.
func pad8(n int) int { return (8 - n%8) % 8 }
