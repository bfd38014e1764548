package stripe

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Frame layout constants.
const (
	HeaderSize = 16
	// TagSize is the AES-GCM tag appended to sealed bodies.
	TagSize = 16
	// FinBodySize is the plaintext body of a FIN frame: the byte count.
	FinBodySize = 8
	// MaxAbortReason bounds the plaintext reason of an ABORT frame.
	MaxAbortReason = 256
	// AbortSeq is the sequence number every ABORT frame carries; it lies
	// outside the data sequence so it never collides with a data nonce.
	AbortSeq = math.MaxUint64
	// CreditBodySize is the plaintext body of a CREDIT frame.
	CreditBodySize = 8
	// ControlSeqBase is the first sequence number of the control space:
	// control frames (CREDIT) number themselves per stream and direction
	// from here, DATA and FIN stay below it, so no two frames of a stream
	// and direction ever share a nonce.
	ControlSeqBase = 1 << 63
	// MaxCreditAhead bounds how far a credit may run ahead of the DATA
	// frames its receiver has sent (in bytes of credit); a credit beyond
	// it is a protocol violation. No receiver's memory holds that much.
	MaxCreditAhead = 1 << 34
	// AckBodySize is the plaintext body of an ACK frame.
	AckBodySize = 8
	// JoinBodySize is the plaintext body of a JOIN frame: its proof.
	JoinBodySize = 32
	// FlagRetransmit marks a DATA or FIN frame sent again after the
	// stream that first carried it was lost: its sequence may lie below
	// the stream's previous one. It is in the header, so it is
	// authenticated with the body.
	FlagRetransmit = 0x01
)

// FrameType is the first byte of a frame header.
type FrameType uint8

// Frame types.
const (
	FrameData  FrameType = 1
	FrameFin   FrameType = 2
	FrameAbort FrameType = 3
	// FrameCredit grants the peer byte credit for the direction it sends.
	FrameCredit FrameType = 4
	// FrameAck acknowledges the frames of the opposite direction
	// delivered to the end host.
	FrameAck FrameType = 5
	// FrameJoin attaches a replacement stream to a running session.
	FrameJoin FrameType = 6
	// FrameBind attaches a pooled stream to a session.
	FrameBind FrameType = 7
)

func (t FrameType) String() string {
	switch t {
	case FrameData:
		return "DATA"
	case FrameFin:
		return "FIN"
	case FrameAbort:
		return "ABORT"
	case FrameCredit:
		return "CREDIT"
	case FrameAck:
		return "ACK"
	case FrameJoin:
		return "JOIN"
	case FrameBind:
		return "BIND"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Control reports whether frames of the type number themselves in the
// control space of their stream (CREDIT, ACK, JOIN, BIND).
func (t FrameType) Control() bool {
	return t == FrameCredit || t == FrameAck || t == FrameJoin || t == FrameBind
}

// Direction names one of the two directions of a session.
type Direction uint8

const (
	// Up is initiator -> responder: client toward server.
	Up Direction = 0
	// Down is responder -> initiator: server toward client.
	Down Direction = 1
)

// Frame errors.
var (
	ErrFrame = errors.New("stripe: malformed frame")
	ErrOpen  = errors.New("stripe: frame authentication failed")
)

// Header is the fixed 16-byte frame header.
type Header struct {
	Type   FrameType
	Flags  uint8
	Stream uint16
	Length uint32
	Seq    uint64
}

// Put writes the header into b[:HeaderSize].
func (h Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = byte(h.Type)
	b[1] = h.Flags
	binary.BigEndian.PutUint16(b[2:], h.Stream)
	binary.BigEndian.PutUint32(b[4:], h.Length)
	binary.BigEndian.PutUint64(b[8:], h.Seq)
}

// ParseHeader decodes a header and checks what can be checked without
// knowing the stream: type, flags and the ABORT sequence number.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header %d of %d bytes", ErrFrame, len(b), HeaderSize)
	}
	h := Header{
		Type:   FrameType(b[0]),
		Flags:  b[1],
		Stream: binary.BigEndian.Uint16(b[2:]),
		Length: binary.BigEndian.Uint32(b[4:]),
		Seq:    binary.BigEndian.Uint64(b[8:]),
	}
	switch {
	case h.Type < FrameData || h.Type > FrameBind:
		return Header{}, fmt.Errorf("%w: unknown type %d", ErrFrame, b[0])
	case h.Flags&^FlagRetransmit != 0 || (h.Flags != 0 && h.Type != FrameData && h.Type != FrameFin):
		return Header{}, fmt.Errorf("%w: %s with flags %#x", ErrFrame, h.Type, h.Flags)
	case h.Type == FrameAbort && h.Seq != AbortSeq:
		return Header{}, fmt.Errorf("%w: ABORT with sequence %d", ErrFrame, h.Seq)
	case h.Type != FrameAbort && h.Seq == AbortSeq:
		return Header{}, fmt.Errorf("%w: %s with the ABORT sequence", ErrFrame, h.Type)
	case h.Type.Control() && h.Seq < ControlSeqBase:
		return Header{}, fmt.Errorf("%w: %s with data sequence %d", ErrFrame, h.Type, h.Seq)
	case (h.Type == FrameData || h.Type == FrameFin) && h.Seq >= ControlSeqBase:
		return Header{}, fmt.Errorf("%w: %s with control sequence %#x", ErrFrame, h.Type, h.Seq)
	}
	return h, nil
}

// Codec seals the frames one stream sends and opens the frames it receives.
// A Codec is used by one sending and one receiving goroutine at a time; the
// two halves share no mutable state, and Unseal, which keeps none, may run
// beside both.
type Codec struct {
	stream    uint16
	chunkSize int
	overhead  int
	send      half
	recv      half
}

type half struct {
	aead cipher.AEAD
	dir  Direction
	// nonce is scratch space so sealing and opening do not allocate.
	nonce [12]byte
}

// NewCodec builds the frame codec of one stream. The initiator sends Up and
// receives Down; the responder the opposite.
func NewCodec(mode Mode, keys *StreamKeys, initiator bool, stream uint16, chunkSize int) (*Codec, error) {
	if chunkSize <= 0 || chunkSize > MaxChunkSize {
		return nil, fmt.Errorf("%w: chunk size %d", ErrInvalid, chunkSize)
	}
	c := &Codec{stream: stream, chunkSize: chunkSize}
	c.send.dir, c.recv.dir = Up, Down
	sendKey, recvKey := &keys.Up, &keys.Down
	if !initiator {
		c.send.dir, c.recv.dir = Down, Up
		sendKey, recvKey = &keys.Down, &keys.Up
	}
	switch mode {
	case ModeNone:
	case ModeAESGCM:
		var err error
		if c.send.aead, err = newGCM(sendKey); err != nil {
			return nil, err
		}
		if c.recv.aead, err = newGCM(recvKey); err != nil {
			return nil, err
		}
		c.overhead = TagSize
	default:
		return nil, fmt.Errorf("%w: mode %d", ErrInvalid, mode)
	}
	return c, nil
}

func newGCM(key *[32]byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("stripe: aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("stripe: gcm: %w", err)
	}
	return aead, nil
}

// Overhead is how many bytes sealing adds to a body.
func (c *Codec) Overhead() int { return c.overhead }

// FrameBufferSize is the buffer size that holds any frame of this codec:
// header, a full chunk, and the tag.
func (c *Codec) FrameBufferSize() int { return FrameBufferSize(c.chunkSize) }

// FrameBufferSize is the buffer size that holds any DATA or FIN frame for a
// chunk size in either mode.
func FrameBufferSize(chunkSize int) int { return HeaderSize + max(chunkSize, FinBodySize) + TagSize }

func (h *half) nonceFor(seq uint64) []byte {
	binary.BigEndian.PutUint32(h.nonce[0:4], uint32(h.dir))
	binary.BigEndian.PutUint64(h.nonce[4:12], seq)
	return h.nonce[:]
}

// Seal turns buf[HeaderSize:HeaderSize+n] (the plaintext body, already in
// place) into a complete frame in buf and returns it. buf needs room for
// the tag after the body. It does not allocate.
func (c *Codec) Seal(buf []byte, typ FrameType, seq uint64, n int) ([]byte, error) {
	return c.SealFlags(buf, typ, 0, seq, n)
}

// SealFlags is Seal with header flags (FlagRetransmit on a DATA or FIN
// frame sent again).
func (c *Codec) SealFlags(buf []byte, typ FrameType, flags uint8, seq uint64, n int) ([]byte, error) {
	if flags&^FlagRetransmit != 0 || (flags != 0 && typ != FrameData && typ != FrameFin) {
		return nil, fmt.Errorf("%w: %s with flags %#x", ErrInvalid, typ, flags)
	}
	if err := c.checkBody(typ, n); err != nil {
		return nil, err
	}
	total := HeaderSize + n + c.overhead
	if len(buf) < total {
		return nil, fmt.Errorf("%w: buffer %d bytes, frame needs %d", ErrInvalid, len(buf), total)
	}
	h := Header{Type: typ, Flags: flags, Stream: c.stream, Length: uint32(n + c.overhead), Seq: seq}
	h.Put(buf)
	if c.send.aead != nil {
		body := buf[HeaderSize : HeaderSize+n]
		c.send.aead.Seal(body[:0], c.send.nonceFor(seq), body, buf[:HeaderSize])
	}
	return buf[:total], nil
}

// Unseal turns a frame this codec sealed back into its plaintext body in
// place (buf[HeaderSize:HeaderSize+n], n as sealed), so a sender can send
// the chunk again on another stream, under that stream's key. It is the
// sending half's inverse of Seal and touches no receive state. It keeps
// no scratch state of its own, so it may run while the stream's writer
// seals other frames (a frame stuck on a stream in loss recovery is taken
// back while the stream goes on).
func (c *Codec) Unseal(buf []byte) error {
	h, err := ParseHeader(buf)
	if err != nil {
		return err
	}
	if h.Stream != c.stream || int(h.Length) < c.overhead || len(buf) < HeaderSize+int(h.Length) {
		return fmt.Errorf("%w: unseal of %s on stream %d, length %d", ErrInvalid, h.Type, h.Stream, h.Length)
	}
	if c.send.aead == nil {
		return nil
	}
	body := buf[HeaderSize : HeaderSize+int(h.Length)]
	var nonce [12]byte
	binary.BigEndian.PutUint32(nonce[0:4], uint32(c.send.dir))
	binary.BigEndian.PutUint64(nonce[4:12], h.Seq)
	if _, err := c.send.aead.Open(body[:0], nonce[:], body, buf[:HeaderSize]); err != nil {
		return fmt.Errorf("%w: unseal %s seq %d", ErrOpen, h.Type, h.Seq)
	}
	return nil
}

// CheckHeader checks a received header against this stream before its body
// is read: the stream index and the body length for the type.
func (c *Codec) CheckHeader(h Header) error {
	if h.Stream != c.stream {
		return fmt.Errorf("%w: stream index %d on stream %d", ErrFrame, h.Stream, c.stream)
	}
	if int(h.Length) < c.overhead {
		return fmt.Errorf("%w: %s body of %d bytes", ErrFrame, h.Type, h.Length)
	}
	return c.checkBody(h.Type, int(h.Length)-c.overhead)
}

func (c *Codec) checkBody(typ FrameType, n int) error {
	switch typ {
	case FrameData:
		if n < 1 || n > c.chunkSize {
			return fmt.Errorf("%w: DATA body of %d bytes, chunk size %d", ErrFrame, n, c.chunkSize)
		}
	case FrameFin:
		if n != FinBodySize {
			return fmt.Errorf("%w: FIN body of %d bytes", ErrFrame, n)
		}
	case FrameAbort:
		if n > MaxAbortReason {
			return fmt.Errorf("%w: ABORT reason of %d bytes", ErrFrame, n)
		}
	case FrameCredit:
		if n != CreditBodySize {
			return fmt.Errorf("%w: CREDIT body of %d bytes", ErrFrame, n)
		}
	case FrameAck:
		if n != AckBodySize {
			return fmt.Errorf("%w: ACK body of %d bytes", ErrFrame, n)
		}
	case FrameJoin:
		if n != JoinBodySize {
			return fmt.Errorf("%w: JOIN body of %d bytes", ErrFrame, n)
		}
	case FrameBind:
		if n != BindBodySize {
			return fmt.Errorf("%w: BIND body of %d bytes", ErrFrame, n)
		}
	default:
		return fmt.Errorf("%w: unknown type %d", ErrFrame, typ)
	}
	return nil
}

// Open authenticates and decrypts a received body in place. hdr is the raw
// header the body came with and body holds exactly h.Length bytes; the
// returned plaintext aliases body. It does not allocate.
func (c *Codec) Open(h Header, hdr, body []byte) ([]byte, error) {
	if err := c.CheckHeader(h); err != nil {
		return nil, err
	}
	if len(hdr) != HeaderSize || len(body) != int(h.Length) {
		return nil, fmt.Errorf("%w: header %d and body %d bytes for length %d", ErrFrame, len(hdr), len(body), h.Length)
	}
	if c.recv.aead == nil {
		return body, nil
	}
	plain, err := c.recv.aead.Open(body[:0], c.recv.nonceFor(h.Seq), body, hdr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s seq %d", ErrOpen, h.Type, h.Seq)
	}
	return plain, nil
}

// PutFinBody writes the FIN body (total payload bytes of the direction).
func PutFinBody(b []byte, total uint64) { binary.BigEndian.PutUint64(b[:FinBodySize], total) }

// ParseFinBody reads the total payload byte count of a FIN.
func ParseFinBody(b []byte) (uint64, error) {
	if len(b) != FinBodySize {
		return 0, fmt.Errorf("%w: FIN body of %d bytes", ErrFrame, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// PutAbortBody writes an abort reason into b, truncated to MaxAbortReason
// bytes on a rune boundary, and returns its length.
func PutAbortBody(b []byte, reason string) int {
	if len(reason) > MaxAbortReason {
		cut := MaxAbortReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	return copy(b, reason)
}

// ParseAbortBody returns the peer's abort reason with anything that is not
// printable UTF-8 replaced, so it is safe to log.
func ParseAbortBody(b []byte) string {
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = '?'
		}
		out = append(out, r)
		b = b[size:]
	}
	return string(out)
}

// ControlSeq is the sequence number of the i-th control frame a stream
// sends in its direction (i counts from 0).
func ControlSeq(i uint64) uint64 { return ControlSeqBase | i }

// PutCreditBody writes a CREDIT body: the cumulative credit in bytes.
func PutCreditBody(b []byte, credit uint64) { binary.BigEndian.PutUint64(b[:CreditBodySize], credit) }

// ParseCreditBody reads the cumulative credit of a CREDIT frame.
func ParseCreditBody(b []byte) (uint64, error) {
	if len(b) != CreditBodySize {
		return 0, fmt.Errorf("%w: CREDIT body of %d bytes", ErrFrame, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// PutAckBody writes an ACK body: how many frames of the opposite
// direction were delivered to the end host.
func PutAckBody(b []byte, delivered uint64) { binary.BigEndian.PutUint64(b[:AckBodySize], delivered) }

// ParseAckBody reads the delivered frame count of an ACK frame.
func ParseAckBody(b []byte) (uint64, error) {
	if len(b) != AckBodySize {
		return 0, fmt.Errorf("%w: ACK body of %d bytes", ErrFrame, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
