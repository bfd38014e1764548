package stripe

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"io"
)

// AgentKeySize is the size of an agent's static X25519 private key and of
// its public key (per-agent keys).
const AgentKeySize = 32

// pairInfo is the HKDF info of a pair key, followed by the initiator's
// name, a zero byte and the responder's name.
const pairInfo = "sosappliance v2 agent pair"

// AgentKey is an agent's own static X25519 key pair: with per-agent keys
// each agent holds its own private key and the others' public keys, and
// the streams of each pair of agents are authenticated by a key only
// those two can derive (HandshakeKey.Pair).
type AgentKey struct {
	priv *ecdh.PrivateKey
}

// NewAgentKey takes a private key of AgentKeySize bytes.
func NewAgentKey(priv []byte) (*AgentKey, error) {
	k, err := ecdh.X25519().NewPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("stripe: agent key: %w", err)
	}
	return &AgentKey{priv: k}, nil
}

// GenerateAgentKey makes a new agent key from rand.
func GenerateAgentKey(rand io.Reader) (*AgentKey, error) {
	k, err := ecdh.X25519().GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("stripe: generate agent key: %w", err)
	}
	return &AgentKey{priv: k}, nil
}

// Private is the private key's bytes, for writing it to its file.
func (k *AgentKey) Private() []byte { return k.priv.Bytes() }

// Public is the public key, which the other agents are given.
func (k *AgentKey) Public() PublicKey {
	var p PublicKey
	copy(p[:], k.priv.PublicKey().Bytes())
	return p
}

// CheckAgentPublicKey refuses an X25519 public key that is not in its
// canonical encoding (the top bit set, or a value of the field's prime or
// more: X25519 reads such keys as another key's, so two agents could hold
// one key written two ways) or whose every key agreement fails (a point
// of small order).
func CheckAgentPublicKey(pub []byte) error {
	if len(pub) != AgentKeySize {
		return fmt.Errorf("%w: agent public key of %d bytes, want %d", ErrInvalid, len(pub), AgentKeySize)
	}
	if pub[31]&0x80 != 0 || !belowPrime(pub) {
		return fmt.Errorf("%w: agent public key not in its canonical encoding", ErrInvalid)
	}
	peer, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return fmt.Errorf("%w: agent public key: %v", ErrInvalid, err)
	}
	probe, err := ecdh.X25519().NewPrivateKey(probeScalar[:])
	if err != nil {
		return err
	}
	if _, err := probe.ECDH(peer); err != nil {
		return fmt.Errorf("%w: agent public key of small order (no key agreement is possible with it)", ErrInvalid)
	}
	return nil
}

// AgentKeyClass is what every key agreement with pub depends on: X25519
// with a fixed scalar, which like every X25519 private key is a multiple
// of 8, so the point's small-order part drops out. Two public keys that
// differ only by such a part (eight spellings of each, every one
// canonical) agree every secret alike and have one class; keys of
// different classes agree different secrets. pub must pass
// CheckAgentPublicKey.
func AgentKeyClass(pub []byte) ([32]byte, error) {
	var class [32]byte
	peer, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return class, fmt.Errorf("%w: agent public key: %v", ErrInvalid, err)
	}
	probe, err := ecdh.X25519().NewPrivateKey(probeScalar[:])
	if err != nil {
		return class, err
	}
	shared, err := probe.ECDH(peer)
	if err != nil {
		return class, fmt.Errorf("%w: agent public key of small order", ErrInvalid)
	}
	copy(class[:], shared)
	return class, nil
}

// probeScalar is a fixed private key to test public keys with: every key
// agreement with a point of small order gives zero, whatever the scalar.
var probeScalar = [AgentKeySize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
	17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}

// belowPrime reports whether a little-endian 255-bit value is below the
// field's prime 2^255 - 19.
func belowPrime(u []byte) bool {
	if u[31] != 0x7f {
		return true
	}
	for i := 30; i >= 1; i-- {
		if u[i] != 0xff {
			return true
		}
	}
	return u[0] < 0xed
}

// Pair derives the handshake key of the streams the agent named
// initiator opens to the one named responder, with per-agent keys: own is
// this agent's key (either of the two), peer the other's public key. The
// key is HKDF-SHA256(secret = X25519(own, peer) || PSK, salt = "", info =
// pairInfo || initiator || 0 || responder, 32 bytes), used as the PSK of
// every step of the handshake. Both agents derive the same key; any other
// agent, PSK or not, cannot, so it cannot pass for either of them. The
// roles are bound: the streams the other way have another key.
func (k *HandshakeKey) Pair(own *AgentKey, peer PublicKey, initiator, responder string) (*HandshakeKey, error) {
	pub, err := ecdh.X25519().NewPublicKey(peer[:])
	if err != nil {
		return nil, fmt.Errorf("%w: agent public key: %v", ErrInvalid, err)
	}
	// ECDH refuses low-order points (an all-zero shared secret).
	dh, err := own.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: agent key agreement: %v", ErrInvalid, err)
	}
	info := pairInfo + initiator + "\x00" + responder
	secret := append(append(make([]byte, 0, len(dh)+len(k.psk)), dh...), k.psk...)
	psk, err := hkdf.Key(sha256.New, secret, nil, info, 32)
	if err != nil {
		return nil, fmt.Errorf("stripe: derive pair key: %w", err)
	}
	return NewHandshakeKey(psk)
}

// HelloResponder reads the responder name of a hello that failed its
// check, for the log only: which agent the initiator meant the stream for.
func HelloResponder(b []byte) (string, error) { return helloName(b, 72, "responder") }

// HelloInitiator reads the initiator name of a hello before it is
// authenticated, to choose the key that authenticates it (per-agent
// keys). Nothing of the hello is to be trusted until ParseHello with that
// key has checked its MAC.
func HelloInitiator(b []byte) (string, error) { return helloName(b, 8, "initiator") }

// helloName reads, unchecked, the name field at off of a hello.
func helloName(b []byte, off int, which string) (string, error) {
	if err := checkMessage(b, HelloSize, kindHello); err != nil {
		return "", err
	}
	name, err := getName(b[off : off+nameField])
	if err != nil {
		return "", err
	}
	if !validName(name) {
		return "", fmt.Errorf("%w: %s name %q", ErrInvalid, which, name)
	}
	return name, nil
}
