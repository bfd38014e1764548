package stripe

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
)

// BindBodySize is the plaintext body of a BIND frame.
const BindBodySize = 152

// BindNonceSize is the fresh nonce of a BIND.
const BindNonceSize = 16

const (
	bindLabel     = "sos v2 bind"
	bindJoinLabel = "sos v2 bind join"
	bindKeysInfo  = "sosappliance v2 bind keys"
	bindRatchet   = "sosappliance v2 bind ratchet"
)

// Bind attaches a pooled stream to a session: the session's id and shape
// and the end hosts' addresses, which a pooled stream's hello left out.
type Bind struct {
	// Generation counts the binds of the stream, from 0; the responder
	// takes exactly the next one, so a replayed BIND is refused.
	Generation  uint64
	Nonce       [BindNonceSize]byte
	Session     SessionID
	Stream      uint16
	Streams     uint16
	ChunkSize   uint32
	QueueLength uint32
	Client      netip.AddrPort
	Server      netip.AddrPort
	// Proof is zero on stream 0 (its bind creates the session and its
	// session key); on any other stream it proves the session key:
	// MAC(session key, "sos v2 bind join" || session id || th ||
	// generation).
	Proof [32]byte
}

func (b *Bind) validate() error {
	h := Hello{Mode: ModeNone, Initiator: "x", Responder: "x", Ephemeral: PublicKey{1},
		Stream: b.Stream, Streams: b.Streams, ChunkSize: b.ChunkSize, Client: b.Client, Server: b.Server}
	if err := h.validate(); err != nil {
		return err
	}
	if b.Stream == 0 && b.Proof != [32]byte{} {
		return fmt.Errorf("%w: BIND of stream 0 with a join proof", ErrInvalid)
	}
	if b.Stream != 0 && b.Proof == [32]byte{} {
		return fmt.Errorf("%w: BIND of stream %d without a join proof", ErrInvalid, b.Stream)
	}
	return nil
}

// PoolStream is the bind state of one pooled stream, the same on both
// ends: the stream's secret (ratcheted after every bind) and the
// generation of its next bind. Its frame codec (from the handshake's
// Secrets.Keys) seals and opens only BIND frames, numbered
// ControlSeq(generation); a bound session's frames use the keys the bind
// derives. It is not safe for concurrent use.
type PoolStream struct {
	th     [32]byte
	secret [32]byte
	next   uint64
}

// PoolStream starts the bind state of a stream whose hello carried
// HelloPool. Its secret is the handshake's session-key slot, which a
// pooled stream never uses as a session key.
func (s *Secrets) PoolStream() *PoolStream {
	return &PoolStream{th: s.th, secret: s.session}
}

// Generation is the generation the stream's next bind carries.
func (p *PoolStream) Generation() uint64 { return p.next }

// Bound is what one bind yields on both ends: the session's frame keys on
// this stream and, on stream 0, the session's key.
type Bound struct {
	Keys StreamKeys
	// SessionKey authenticates the later binds and joins of the session;
	// it is set only by the bind of stream 0.
	SessionKey *[32]byte
}

func (p *PoolStream) joinProof(sessionKey *[32]byte, id SessionID, gen uint64) [32]byte {
	var g [8]byte
	binary.BigEndian.PutUint64(g[:], gen)
	return mac(sessionKey[:], bindJoinLabel, id[:], p.th[:], g[:])
}

// NewBind fills in b's generation, a fresh nonce from rand and, when
// b.Stream is not 0, the join proof under sessionKey (the session's key,
// from its stream 0's bind or handshake); it returns the BIND body and
// the keys. The stream's state moves to the next generation.
func (p *PoolStream) NewBind(rand io.Reader, b Bind, sessionKey *[32]byte) ([BindBodySize]byte, *Bound, error) {
	var body [BindBodySize]byte
	b.Generation = p.next
	if _, err := io.ReadFull(rand, b.Nonce[:]); err != nil {
		return body, nil, fmt.Errorf("stripe: bind nonce: %w", err)
	}
	b.Proof = [32]byte{}
	if b.Stream != 0 {
		if sessionKey == nil {
			return body, nil, fmt.Errorf("%w: BIND of stream %d needs the session key", ErrInvalid, b.Stream)
		}
		b.Proof = p.joinProof(sessionKey, b.Session, b.Generation)
	}
	if err := b.validate(); err != nil {
		return body, nil, err
	}
	binary.BigEndian.PutUint64(body[0:], b.Generation)
	copy(body[8:24], b.Nonce[:])
	copy(body[24:40], b.Session[:])
	binary.BigEndian.PutUint16(body[40:], b.Stream)
	binary.BigEndian.PutUint16(body[42:], b.Streams)
	binary.BigEndian.PutUint32(body[44:], b.ChunkSize)
	binary.BigEndian.PutUint32(body[48:], b.QueueLength)
	putAddrPort(body[52:70], b.Client)
	putAddrPort(body[70:88], b.Server)
	copy(body[88:120], b.Proof[:])
	m := mac(p.secret[:], bindLabel, p.th[:], body[:120])
	copy(body[120:], m[:])
	bound, err := p.advance(&b)
	if err != nil {
		return [BindBodySize]byte{}, nil, err
	}
	return body, bound, nil
}

// AcceptBind checks a BIND body read on this stream: its MAC under the
// stream's secret, then its generation (exactly the next: a replay of an
// earlier bind is refused) and fields. On stream 0 it returns the keys at
// once; on any other stream the caller checks the proof with
// VerifyBindProof under the session's key before it uses the stream, and
// resets the stream on failure. The stream's state moves to the next
// generation only when the bind is accepted.
func (p *PoolStream) AcceptBind(body []byte) (Bind, *Bound, error) {
	var b Bind
	if len(body) != BindBodySize {
		return b, nil, fmt.Errorf("%w: BIND body of %d bytes", ErrFrame, len(body))
	}
	want := mac(p.secret[:], bindLabel, p.th[:], body[:120])
	if !hmac.Equal(want[:], body[120:BindBodySize]) {
		return b, nil, ErrMAC
	}
	b.Generation = binary.BigEndian.Uint64(body[0:])
	if b.Generation != p.next {
		return Bind{}, nil, fmt.Errorf("%w: BIND generation %d, this stream's next is %d (replayed)", ErrInvalid, b.Generation, p.next)
	}
	copy(b.Nonce[:], body[8:24])
	copy(b.Session[:], body[24:40])
	b.Stream = binary.BigEndian.Uint16(body[40:])
	b.Streams = binary.BigEndian.Uint16(body[42:])
	b.ChunkSize = binary.BigEndian.Uint32(body[44:])
	b.QueueLength = binary.BigEndian.Uint32(body[48:])
	b.Client = getAddrPort(body[52:70])
	b.Server = getAddrPort(body[70:88])
	copy(b.Proof[:], body[88:120])
	if err := b.validate(); err != nil {
		return Bind{}, nil, err
	}
	bound, err := p.advance(&b)
	if err != nil {
		return Bind{}, nil, err
	}
	return b, bound, nil
}

// VerifyBindProof checks the join proof of an accepted BIND of a stream
// other than 0 under the session's key.
func (p *PoolStream) VerifyBindProof(sessionKey *[32]byte, b *Bind) error {
	want := p.joinProof(sessionKey, b.Session, b.Generation)
	if b.Stream == 0 || !hmac.Equal(want[:], b.Proof[:]) {
		return ErrMAC
	}
	return nil
}

// advance derives the keys of bind b from the stream's current secret,
// then ratchets the secret, so a stream's later state reveals nothing of
// the keys of the sessions it carried before.
//
// okm = HKDF-SHA256(secret = stream secret, salt = nonce, info = "sosappliance
// v2 bind keys" || th || generation || session id, 96 bytes): Up, Down,
// session key; the next secret is HKDF-SHA256(secret = stream secret, salt
// = th, info = "sosappliance v2 bind ratchet" || generation, 32 bytes).
func (p *PoolStream) advance(b *Bind) (*Bound, error) {
	var g [8]byte
	binary.BigEndian.PutUint64(g[:], b.Generation)
	info := append(append(append([]byte(bindKeysInfo), p.th[:]...), g[:]...), b.Session[:]...)
	okm, err := hkdf.Key(sha256.New, p.secret[:], b.Nonce[:], string(info), 96)
	if err != nil {
		return nil, fmt.Errorf("stripe: derive bind keys: %w", err)
	}
	next, err := hkdf.Key(sha256.New, p.secret[:], p.th[:], bindRatchet+string(g[:]), 32)
	if err != nil {
		return nil, fmt.Errorf("stripe: ratchet stream secret: %w", err)
	}
	bound := &Bound{}
	copy(bound.Keys.Up[:], okm[0:32])
	copy(bound.Keys.Down[:], okm[32:64])
	if b.Stream == 0 {
		var k [32]byte
		copy(k[:], okm[64:96])
		bound.SessionKey = &k
	}
	copy(p.secret[:], next)
	p.next++
	return bound, nil
}
