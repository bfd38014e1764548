package stripe

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/netip"
	"unicode/utf8"
)

// Sizes of the handshake messages on the wire.
const (
	HelloSize   = 264
	ReplySize   = 72
	ConfirmSize = 32
	// PreambleSize is how much of a message names its protocol version:
	// a responder reads this much before it knows how long the hello is.
	PreambleSize = 8
	// PublicKeySize is an X25519 public key.
	PublicKeySize = 32
	// MaxNameSize bounds an agent name in the handshake (UTF-8 bytes).
	MaxNameSize = 63
	nameField   = 1 + MaxNameSize
	// MinPSKSize is the shortest pre-shared key accepted: 128 bits.
	MinPSKSize = 16
	// MaxChunkSize bounds the chunk size a hello may announce, so a peer can
	// never make the receiver allocate more than this per frame.
	MaxChunkSize = 16 << 20
)

// Version is the protocol version carried in every handshake message.
const Version = 2

var magic = [4]byte{'S', 'O', 'S', 't'}

// Message kinds, byte 5 of every handshake message. A hello is only ever
// parsed by a responder and a reply only by an initiator; the kind and the
// MAC labels differ, so neither can be reflected as the other.
const (
	kindHello = 1
	kindReply = 2
)

const (
	helloLabel     = "sos v2 hello"
	replyLabel     = "sos v2 reply"
	confirmLabel   = "sos v2 confirm"
	joinLabel      = "sos v2 join"
	authInfo       = "sosappliance v2 handshake auth"
	streamKeysInfo = "sosappliance v2 stream keys"
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

// Reply statuses. Anything but StatusAccepted refuses the stream. Values
// are part of the wire format: append, never renumber.
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
	StatusVersion
	StatusWrongResponder
	StatusUnknownInitiator
	StatusShapeMismatch
	StatusReflected
	StatusUnknownSession
	StatusPoolRefused
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
		return "memory cap exceeded"
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
	case StatusVersion:
		return fmt.Sprintf("protocol version not spoken here (this agent speaks version %d)", Version)
	case StatusWrongResponder:
		return "hello names another agent as responder"
	case StatusUnknownInitiator:
		return "initiator is not a client-side agent of this whitelist"
	case StatusShapeMismatch:
		return "session shape (streams, chunk size, queue length) differs from the server side's whitelist"
	case StatusReflected:
		return "hello carries this agent's own key (reflected)"
	case StatusUnknownSession:
		return "join names no running session of this agent (it lost the session's state)"
	case StatusPoolRefused:
		return "pooled stream refused (no pool for this peer, or its pool is full)"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// SessionID names a session on every stream of it.
type SessionID [16]byte

func (id SessionID) String() string { return fmt.Sprintf("%x", id[:]) }

// PublicKey is an ephemeral X25519 public key as it travels.
type PublicKey [PublicKeySize]byte

// Handshake errors. Parse functions wrap them with detail.
var (
	ErrShort       = errors.New("stripe: message too short")
	ErrMagic       = errors.New("stripe: bad magic")
	ErrVersion     = errors.New("stripe: unsupported protocol version")
	ErrMAC         = errors.New("stripe: handshake authentication failed")
	ErrInvalid     = errors.New("stripe: invalid field")
	ErrPSKTooShort = fmt.Errorf("stripe: pre-shared key shorter than %d bytes", MinPSKSize)
)

// HandshakeKey holds the pre-shared key and the MAC key derived from it.
type HandshakeKey struct {
	psk  []byte
	auth [32]byte
}

// NewHandshakeKey derives the handshake key from the pre-shared key.
func NewHandshakeKey(psk []byte) (*HandshakeKey, error) {
	if len(psk) < MinPSKSize {
		return nil, ErrPSKTooShort
	}
	k, err := hkdf.Key(sha256.New, psk, nil, authInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("stripe: derive handshake key: %w", err)
	}
	hk := &HandshakeKey{psk: append([]byte(nil), psk...)}
	copy(hk.auth[:], k)
	return hk, nil
}

// Equal reports whether k and o come from the same pre-shared key.
func (k *HandshakeKey) Equal(o *HandshakeKey) bool {
	return k != nil && o != nil && subtle.ConstantTimeCompare(k.auth[:], o.auth[:]) == 1
}

func mac(key []byte, label string, parts ...[]byte) [32]byte {
	var h hash.Hash = hmac.New(sha256.New, key)
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
	Mode Mode
	// Initiator and Responder name the two agents; the responder refuses
	// a hello that names another agent, so a stream cannot be reflected or
	// redirected to an agent it was not meant for (with per-agent keys
	// such a hello is keyed for another pair: the responder cannot check
	// it, and closes it without an answer).
	Initiator, Responder string
	// Ephemeral is the initiator's fresh X25519 public key for this stream.
	Ephemeral   PublicKey
	Session     SessionID
	Stream      uint16
	Streams     uint16
	ChunkSize   uint32
	QueueLength uint32
	Client      netip.AddrPort
	Server      netip.AddrPort
	// Join marks a replacement stream of a running session (hello flag
	// HelloJoin): the responder admits it only into a session it holds,
	// once the stream's JOIN frame proves the session key.
	Join bool
	// Pool marks a pooled stream (hello flag HelloPool): it names no
	// session, so Session, Stream, Streams, ChunkSize, QueueLength,
	// Client and Server are all zero; a BIND attaches it to a session
	// later.
	Pool bool
}

// Hello flags.
const (
	// HelloJoin is the hello flag of a replacement stream.
	HelloJoin = 0x01
	// HelloPool is the hello flag of a pooled stream.
	HelloPool = 0x02
)

func validName(s string) bool {
	if s == "" || len(s) > MaxNameSize || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func (h *Hello) validate() error {
	switch {
	case h.Mode != ModeNone && h.Mode != ModeAESGCM:
		return fmt.Errorf("%w: mode %d", ErrInvalid, h.Mode)
	case !validName(h.Initiator):
		return fmt.Errorf("%w: initiator name %q", ErrInvalid, h.Initiator)
	case !validName(h.Responder):
		return fmt.Errorf("%w: responder name %q", ErrInvalid, h.Responder)
	case h.Ephemeral == PublicKey{}:
		return fmt.Errorf("%w: no ephemeral key", ErrInvalid)
	case h.Pool && h.Join:
		return fmt.Errorf("%w: hello both pooled and joining", ErrInvalid)
	case h.Pool:
		if h.Session != (SessionID{}) || h.Stream != 0 || h.Streams != 0 || h.ChunkSize != 0 || h.QueueLength != 0 ||
			h.Client.IsValid() || h.Server.IsValid() {
			return fmt.Errorf("%w: pooled hello names a session", ErrInvalid)
		}
		return nil
	case h.Streams == 0:
		return fmt.Errorf("%w: stream count 0", ErrInvalid)
	case h.Stream >= h.Streams:
		return fmt.Errorf("%w: stream index %d of %d", ErrInvalid, h.Stream, h.Streams)
	case h.ChunkSize == 0 || h.ChunkSize > MaxChunkSize:
		return fmt.Errorf("%w: chunk size %d", ErrInvalid, h.ChunkSize)
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
	putPreamble(b[:], kindHello, byte(h.Mode))
	if h.Join {
		b[7] |= HelloJoin
	}
	if h.Pool {
		b[7] |= HelloPool
	}
	putName(b[8:72], h.Initiator)
	putName(b[72:136], h.Responder)
	copy(b[136:168], h.Ephemeral[:])
	copy(b[168:184], h.Session[:])
	binary.BigEndian.PutUint16(b[184:], h.Stream)
	binary.BigEndian.PutUint16(b[186:], h.Streams)
	binary.BigEndian.PutUint32(b[188:], h.ChunkSize)
	binary.BigEndian.PutUint32(b[192:], h.QueueLength)
	putAddrPort(b[196:214], h.Client)
	putAddrPort(b[214:232], h.Server)
	m := mac(key.auth[:], helloLabel, b[:232])
	copy(b[232:], m[:])
	return b, nil
}

// ParseHello checks a hello's preamble and MAC, then its fields.
func ParseHello(b []byte, key *HandshakeKey) (Hello, error) {
	var h Hello
	if err := checkMessage(b, HelloSize, kindHello); err != nil {
		return h, err
	}
	want := mac(key.auth[:], helloLabel, b[:232])
	if !hmac.Equal(want[:], b[232:HelloSize]) {
		return h, ErrMAC
	}
	if b[7]&^(HelloJoin|HelloPool) != 0 {
		return h, fmt.Errorf("%w: hello flags %#x", ErrInvalid, b[7])
	}
	var err error
	h.Mode = Mode(b[6])
	h.Join = b[7]&HelloJoin != 0
	h.Pool = b[7]&HelloPool != 0
	if h.Initiator, err = getName(b[8:72]); err != nil {
		return Hello{}, err
	}
	if h.Responder, err = getName(b[72:136]); err != nil {
		return Hello{}, err
	}
	copy(h.Ephemeral[:], b[136:168])
	copy(h.Session[:], b[168:184])
	h.Stream = binary.BigEndian.Uint16(b[184:])
	h.Streams = binary.BigEndian.Uint16(b[186:])
	h.ChunkSize = binary.BigEndian.Uint32(b[188:])
	h.QueueLength = binary.BigEndian.Uint32(b[192:])
	h.Client = getAddrPort(b[196:214])
	h.Server = getAddrPort(b[214:232])
	if err := h.validate(); err != nil {
		return Hello{}, err
	}
	return h, nil
}

// Reply answers a hello.
type Reply struct {
	Status Status
	// Ephemeral is the responder's fresh X25519 public key; zero in a
	// refusal, which derives no keys.
	Ephemeral PublicKey
}

// Marshal returns the reply's wire form, MAC'd over the hello it answers.
func (r *Reply) Marshal(hello []byte, key *HandshakeKey) [ReplySize]byte {
	var b [ReplySize]byte
	putPreamble(b[:], kindReply, byte(r.Status))
	copy(b[8:40], r.Ephemeral[:])
	m := mac(key.auth[:], replyLabel, hello, b[:40])
	copy(b[40:], m[:])
	return b
}

// ParseReply checks a reply against the hello it answers.
func ParseReply(hello, b []byte, key *HandshakeKey) (Reply, error) {
	var r Reply
	if err := checkMessage(b, ReplySize, kindReply); err != nil {
		return r, err
	}
	want := mac(key.auth[:], replyLabel, hello, b[:40])
	if !hmac.Equal(want[:], b[40:ReplySize]) {
		return r, ErrMAC
	}
	if b[7] != 0 {
		return r, fmt.Errorf("%w: reply flags %#x", ErrInvalid, b[7])
	}
	r.Status = Status(b[6])
	copy(r.Ephemeral[:], b[8:40])
	switch {
	case r.Status >= statusCount:
		return Reply{}, fmt.Errorf("%w: reply status %d", ErrInvalid, b[6])
	case r.Status == StatusAccepted && r.Ephemeral == PublicKey{}:
		return Reply{}, fmt.Errorf("%w: accepting reply without a key", ErrInvalid)
	}
	return r, nil
}

// VersionRefusal is what a responder answers to a hello of another
// protocol version. It cannot be authenticated (the two versions share no
// MAC), so it carries nothing but the version and StatusVersion; it is as
// long as a version 1 reply, so a version 1 initiator reads all of it and
// reports the version it found.
func VersionRefusal() [ReplySize]byte {
	var b [ReplySize]byte
	putPreamble(b[:], kindReply, byte(StatusVersion))
	return b
}

// IsVersionRefusal says whether an unauthenticated reply is exactly
// VersionRefusal. It can be forged by anyone on the path, like any TCP
// reset, so it only explains a failure; it never makes one.
func IsVersionRefusal(b []byte) bool {
	want := VersionRefusal()
	return len(b) == ReplySize && [ReplySize]byte(b) == want
}

// PeekVersion reads the protocol version from the first PreambleSize bytes
// of a handshake message. It returns ErrVersion (wrapped, naming the
// version) for a well-formed preamble of another version, so the caller
// can answer with VersionRefusal instead of closing silently.
func PeekVersion(b []byte) (uint8, error) {
	if len(b) < 5 {
		return 0, fmt.Errorf("%w: %d of %d bytes", ErrShort, len(b), PreambleSize)
	}
	if [4]byte(b[0:4]) != magic {
		return 0, ErrMagic
	}
	if b[4] != Version {
		return b[4], fmt.Errorf("%w: peer speaks version %d, this agent version %d", ErrVersion, b[4], Version)
	}
	return b[4], nil
}

// Ephemeral is one side's X25519 key pair for one stream. Generate a new
// one per stream and drop it after Finish: that is what makes the stream
// keys forward secret.
type Ephemeral struct {
	priv *ecdh.PrivateKey
}

// NewEphemeral draws a key pair from rand (crypto/rand.Reader in use; a
// fixed reader gives the golden vectors).
func NewEphemeral(rand io.Reader) (*Ephemeral, error) {
	var seed [32]byte
	if _, err := io.ReadFull(rand, seed[:]); err != nil {
		return nil, fmt.Errorf("stripe: ephemeral key: %w", err)
	}
	priv, err := ecdh.X25519().NewPrivateKey(seed[:])
	if err != nil {
		return nil, fmt.Errorf("stripe: ephemeral key: %w", err)
	}
	return &Ephemeral{priv: priv}, nil
}

// Public is the key to put in a hello or a reply.
func (e *Ephemeral) Public() PublicKey {
	var p PublicKey
	copy(p[:], e.priv.PublicKey().Bytes())
	return p
}

// StreamKeys are the frame keys of one stream, one per direction.
type StreamKeys struct {
	Up   [32]byte
	Down [32]byte
}

// Secrets are what a completed handshake yields: the frame keys and the
// key that authenticates the confirm.
type Secrets struct {
	Keys    StreamKeys
	confirm [32]byte
	th      [32]byte
	session [32]byte
}

// Finish runs the key agreement of a stream: X25519 of our ephemeral key
// with the peer's, mixed with the PSK and salted with the hash of the
// exact hello and reply bytes. Either side calls it with its own key pair
// and the other's public key; both get the same Secrets.
func Finish(key *HandshakeKey, own *Ephemeral, peer PublicKey, hello, reply []byte) (*Secrets, error) {
	pub, err := ecdh.X25519().NewPublicKey(peer[:])
	if err != nil {
		return nil, fmt.Errorf("%w: peer key: %v", ErrInvalid, err)
	}
	// ECDH refuses low-order points (an all-zero shared secret).
	dh, err := own.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: key agreement: %v", ErrInvalid, err)
	}
	th := sha256.New()
	th.Write(hello)
	th.Write(reply)
	var s Secrets
	th.Sum(s.th[:0])
	ikm := append(append(make([]byte, 0, len(dh)+len(key.psk)), dh...), key.psk...)
	// HKDF output is prefix-stable: the first 96 bytes are those of the
	// first step of version 2, the last 32 the session key.
	okm, err := hkdf.Key(sha256.New, ikm, s.th[:], streamKeysInfo, 128)
	if err != nil {
		return nil, fmt.Errorf("stripe: derive stream keys: %w", err)
	}
	copy(s.confirm[:], okm[:32])
	copy(s.Keys.Up[:], okm[32:64])
	copy(s.Keys.Down[:], okm[64:96])
	copy(s.session[:], okm[96:128])
	return &s, nil
}

// Confirm returns the initiator's final handshake message: proof that it
// holds the PSK and its ephemeral private key, bound to this transcript.
func (s *Secrets) Confirm() [ConfirmSize]byte {
	return mac(s.confirm[:], confirmLabel, s.th[:])
}

// SessionKey is the key a session takes from the handshake of its stream
// 0: it authenticates the JOIN of every replacement stream. No other
// stream's handshake yields it.
func (s *Secrets) SessionKey() [32]byte { return s.session }

// JoinProof is the body of the JOIN frame on this (replacement) stream:
// MAC(session key, "sos v2 join" || session id || this stream's
// transcript hash), so a proof is good for one session and one stream.
func (s *Secrets) JoinProof(sessionKey *[32]byte, id SessionID) [JoinBodySize]byte {
	return mac(sessionKey[:], joinLabel, id[:], s.th[:])
}

// VerifyJoin checks the JOIN proof read on this stream.
func (s *Secrets) VerifyJoin(sessionKey *[32]byte, id SessionID, proof []byte) error {
	want := s.JoinProof(sessionKey, id)
	if len(proof) != JoinBodySize || !hmac.Equal(want[:], proof) {
		return ErrMAC
	}
	return nil
}

// VerifyConfirm checks the initiator's confirm.
func (s *Secrets) VerifyConfirm(confirm []byte) error {
	want := s.Confirm()
	if len(confirm) != ConfirmSize || !hmac.Equal(want[:], confirm) {
		return ErrMAC
	}
	return nil
}

func putPreamble(b []byte, kind, b6 byte) {
	copy(b[0:4], magic[:])
	b[4] = Version
	b[5] = kind
	b[6] = b6
}

func checkMessage(b []byte, size int, kind byte) error {
	if len(b) < size {
		return fmt.Errorf("%w: %d of %d bytes", ErrShort, len(b), size)
	}
	if len(b) > size {
		return fmt.Errorf("%w: %d bytes, want %d", ErrInvalid, len(b), size)
	}
	if _, err := PeekVersion(b); err != nil {
		return err
	}
	if b[5] != kind {
		return fmt.Errorf("%w: message kind %d, want %d", ErrInvalid, b[5], kind)
	}
	return nil
}

func putName(b []byte, s string) {
	b[0] = byte(len(s))
	copy(b[1:nameField], s)
}

func getName(b []byte) (string, error) {
	n := int(b[0])
	if n == 0 || n > MaxNameSize {
		return "", fmt.Errorf("%w: name length %d", ErrInvalid, n)
	}
	for _, c := range b[1+n : nameField] {
		if c != 0 {
			return "", fmt.Errorf("%w: name padding not zero", ErrInvalid)
		}
	}
	return string(b[1 : 1+n]), nil
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
