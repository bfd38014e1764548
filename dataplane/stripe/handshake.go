package stripe

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"net/netip"
)

// Sizes of the handshake messages on the wire.
const (
	HelloSize   = 136
	ReplySize   = 72
	ConfirmSize = 32
	NonceSize   = 32
	// MinPSKSize is the shortest pre-shared key accepted: 128 bits.
	MinPSKSize = 16
	// MaxChunkSize bounds the chunk size a hello may announce, so a peer can
	// never make the receiver allocate more than this per frame.
	MaxChunkSize = 16 << 20
)

// Version is the protocol version carried in every handshake message.
const Version = 1

var magic = [4]byte{'S', 'O', 'S', 't'}

const (
	helloLabel     = "sos hello v1"
	replyLabel     = "sos reply v1"
	confirmLabel   = "sos confirm v1"
	handshakeInfo  = "sosappliance handshake v1"
	streamKeysInfo = "sosappliance stripe v1 keys"
)

// Mode is the frame protection negotiated in the hello.
type Mode uint8

const (
	// ModeNone sends frame bodies in plaintext; only the handshake is
	// authenticated. Chosen only when the configuration says so.
	ModeNone Mode = 0
	// ModeAESGCM seals every frame body with AES-256-GCM.
	ModeAESGCM Mode = 1
)

func (m Mode) String() string {
	switch m {
	case ModeNone:
		return "none"
	case ModeAESGCM:
		return "aes-256-gcm"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Status is the responder's answer to a hello.
type Status uint8

// Reply statuses. Anything but StatusAccepted refuses the stream.
const (
	StatusAccepted Status = iota
	StatusSessionLimit
	StatusStreamLimit
	StatusMemoryLimit
	StatusNotWhitelisted
	StatusModeMismatch
	StatusSessionMismatch
	StatusDuplicateStream
	StatusShuttingDown
	statusCount
)

func (s Status) String() string {
	switch s {
	case StatusAccepted:
		return "accepted"
	case StatusSessionLimit:
		return "session limit reached"
	case StatusStreamLimit:
		return "too many streams"
	case StatusMemoryLimit:
		return "session memory cap exceeded"
	case StatusNotWhitelisted:
		return "not whitelisted at the server side"
	case StatusModeMismatch:
		return "encryption mode mismatch"
	case StatusSessionMismatch:
		return "stream parameters differ from the session's"
	case StatusDuplicateStream:
		return "stream index already joined"
	case StatusShuttingDown:
		return "agent shutting down"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// SessionID names a session on every stream of it.
type SessionID [16]byte

func (id SessionID) String() string { return fmt.Sprintf("%x", id[:]) }

// Nonce is a handshake nonce; each side draws a fresh one per stream.
type Nonce [NonceSize]byte

// Handshake errors. Parse functions wrap them with detail.
var (
	ErrShort       = errors.New("stripe: message too short")
	ErrMagic       = errors.New("stripe: bad magic")
	ErrVersion     = errors.New("stripe: unsupported version")
	ErrMAC         = errors.New("stripe: handshake authentication failed")
	ErrInvalid     = errors.New("stripe: invalid field")
	ErrPSKTooShort = fmt.Errorf("stripe: pre-shared key shorter than %d bytes", MinPSKSize)
)

// HandshakeKey is the MAC key of the handshake, derived once from the PSK.
type HandshakeKey struct {
	psk []byte
	mac [32]byte
}

// NewHandshakeKey derives the handshake key from the pre-shared key.
func NewHandshakeKey(psk []byte) (*HandshakeKey, error) {
	if len(psk) < MinPSKSize {
		return nil, ErrPSKTooShort
	}
	k, err := hkdf.Key(sha256.New, psk, nil, handshakeInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("stripe: derive handshake key: %w", err)
	}
	hk := &HandshakeKey{psk: append([]byte(nil), psk...)}
	copy(hk.mac[:], k)
	return hk, nil
}

func (k *HandshakeKey) sum(label string, parts ...[]byte) [32]byte {
	var h hash.Hash = hmac.New(sha256.New, k.mac[:])
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write(p)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Hello opens one stream of a session.
type Hello struct {
	Mode        Mode
	Stream      uint16
	Streams     uint16
	ChunkSize   uint32
	QueueLength uint32
	Session     SessionID
	Client      netip.AddrPort
	Server      netip.AddrPort
	Nonce       Nonce
}

func (h *Hello) validate() error {
	switch {
	case h.Mode != ModeNone && h.Mode != ModeAESGCM:
		return fmt.Errorf("%w: mode %d", ErrInvalid, h.Mode)
	case h.Streams == 0:
		return fmt.Errorf("%w: stream count 0", ErrInvalid)
	case h.Stream >= h.Streams:
		return fmt.Errorf("%w: stream index %d of %d", ErrInvalid, h.Stream, h.Streams)
	case h.ChunkSize == 0 || h.ChunkSize > MaxChunkSize:
		return fmt.Errorf("%w: chunk size %d", ErrInvalid, h.ChunkSize)
	case h.QueueLength == 0:
		return fmt.Errorf("%w: queue length 0", ErrInvalid)
	case !h.Client.IsValid() || !h.Server.IsValid():
		return fmt.Errorf("%w: client or server address missing", ErrInvalid)
	case h.Client.Addr().Is4() != h.Server.Addr().Is4():
		return fmt.Errorf("%w: client %s and server %s differ in address family", ErrInvalid, h.Client, h.Server)
	}
	return nil
}

// Marshal validates the hello and returns its wire form with the MAC.
func (h *Hello) Marshal(key *HandshakeKey) ([HelloSize]byte, error) {
	var b [HelloSize]byte
	if err := h.validate(); err != nil {
		return b, err
	}
	copy(b[0:4], magic[:])
	b[4] = Version
	b[5] = byte(h.Mode)
	binary.BigEndian.PutUint16(b[6:], h.Stream)
	binary.BigEndian.PutUint16(b[8:], h.Streams)
	binary.BigEndian.PutUint32(b[12:], h.ChunkSize)
	binary.BigEndian.PutUint32(b[16:], h.QueueLength)
	copy(b[20:36], h.Session[:])
	putAddrPort(b[36:54], h.Client)
	putAddrPort(b[54:72], h.Server)
	copy(b[72:104], h.Nonce[:])
	mac := key.sum(helloLabel, b[:104])
	copy(b[104:], mac[:])
	return b, nil
}

// ParseHello checks a hello's magic, version and MAC, then its fields.
func ParseHello(b []byte, key *HandshakeKey) (Hello, error) {
	var h Hello
	if err := checkPreamble(b, HelloSize); err != nil {
		return h, err
	}
	want := key.sum(helloLabel, b[:104])
	if !hmac.Equal(want[:], b[104:HelloSize]) {
		return h, ErrMAC
	}
	if flags := binary.BigEndian.Uint16(b[10:]); flags != 0 {
		return h, fmt.Errorf("%w: hello flags %#x", ErrInvalid, flags)
	}
	h.Mode = Mode(b[5])
	h.Stream = binary.BigEndian.Uint16(b[6:])
	h.Streams = binary.BigEndian.Uint16(b[8:])
	h.ChunkSize = binary.BigEndian.Uint32(b[12:])
	h.QueueLength = binary.BigEndian.Uint32(b[16:])
	copy(h.Session[:], b[20:36])
	h.Client = getAddrPort(b[36:54])
	h.Server = getAddrPort(b[54:72])
	copy(h.Nonce[:], b[72:104])
	if err := h.validate(); err != nil {
		return Hello{}, err
	}
	return h, nil
}

// Reply answers a hello.
type Reply struct {
	Status Status
	Nonce  Nonce
}

// Marshal returns the reply's wire form, MAC'd over the hello it answers.
func (r *Reply) Marshal(hello []byte, key *HandshakeKey) [ReplySize]byte {
	var b [ReplySize]byte
	copy(b[0:4], magic[:])
	b[4] = Version
	b[5] = byte(r.Status)
	copy(b[8:40], r.Nonce[:])
	mac := key.sum(replyLabel, hello, b[:40])
	copy(b[40:], mac[:])
	return b
}

// ParseReply checks a reply against the hello it answers.
func ParseReply(hello, b []byte, key *HandshakeKey) (Reply, error) {
	var r Reply
	if err := checkPreamble(b, ReplySize); err != nil {
		return r, err
	}
	want := key.sum(replyLabel, hello, b[:40])
	if !hmac.Equal(want[:], b[40:ReplySize]) {
		return r, ErrMAC
	}
	if flags := binary.BigEndian.Uint16(b[6:]); flags != 0 {
		return r, fmt.Errorf("%w: reply flags %#x", ErrInvalid, flags)
	}
	r.Status = Status(b[5])
	if r.Status >= statusCount {
		return Reply{}, fmt.Errorf("%w: reply status %d", ErrInvalid, b[5])
	}
	copy(r.Nonce[:], b[8:40])
	return r, nil
}

// Confirm returns the initiator's final handshake message.
func Confirm(hello, reply []byte, key *HandshakeKey) [ConfirmSize]byte {
	return key.sum(confirmLabel, hello, reply)
}

// VerifyConfirm checks the initiator's confirm.
func VerifyConfirm(hello, reply, confirm []byte, key *HandshakeKey) error {
	want := key.sum(confirmLabel, hello, reply)
	if len(confirm) != ConfirmSize || !hmac.Equal(want[:], confirm) {
		return ErrMAC
	}
	return nil
}

// StreamKeys are the frame keys of one stream, one per direction.
type StreamKeys struct {
	Up   [32]byte
	Down [32]byte
}

// DeriveStreamKeys computes a stream's keys from the PSK, the session id and
// both nonces of its handshake.
func DeriveStreamKeys(key *HandshakeKey, h *Hello, responder Nonce) (StreamKeys, error) {
	var ks StreamKeys
	info := make([]byte, 0, len(streamKeysInfo)+2+2*NonceSize)
	info = append(info, streamKeysInfo...)
	info = binary.BigEndian.AppendUint16(info, h.Stream)
	info = append(info, h.Nonce[:]...)
	info = append(info, responder[:]...)
	k, err := hkdf.Key(sha256.New, key.psk, h.Session[:], string(info), 64)
	if err != nil {
		return ks, fmt.Errorf("stripe: derive stream keys: %w", err)
	}
	copy(ks.Up[:], k[:32])
	copy(ks.Down[:], k[32:])
	return ks, nil
}

func checkPreamble(b []byte, size int) error {
	if len(b) < size {
		return fmt.Errorf("%w: %d of %d bytes", ErrShort, len(b), size)
	}
	if len(b) > size {
		return fmt.Errorf("%w: %d bytes, want %d", ErrInvalid, len(b), size)
	}
	if [4]byte(b[0:4]) != magic {
		return ErrMagic
	}
	if b[4] != Version {
		return fmt.Errorf("%w: %d", ErrVersion, b[4])
	}
	return nil
}

func putAddrPort(b []byte, ap netip.AddrPort) {
	a16 := ap.Addr().As16()
	copy(b[:16], a16[:])
	binary.BigEndian.PutUint16(b[16:], ap.Port())
}

func getAddrPort(b []byte) netip.AddrPort {
	a := netip.AddrFrom16([16]byte(b[:16])).Unmap()
	if a.IsUnspecified() {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[16:]))
}
