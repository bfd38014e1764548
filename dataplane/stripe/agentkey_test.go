package stripe

import (
	"bytes"
	"errors"
	"testing"
)

func fixedAgentKey(t testing.TB, seed byte) *AgentKey {
	t.Helper()
	priv := make([]byte, AgentKeySize)
	for i := range priv {
		priv[i] = seed + byte(i)
	}
	k, err := NewAgentKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pairOf(t testing.TB, psk *HandshakeKey, own *AgentKey, peer PublicKey, initiator, responder string) *HandshakeKey {
	t.Helper()
	k, err := psk.Pair(own, peer, initiator, responder)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPairKey: two agents derive the same pair key, each from its own
// private key and the other's public key; a third agent holding the PSK
// and a key of its own derives another, and so cannot pass for either;
// the other direction, and another PSK, give other keys. A hello MAC'd
// with the pair key opens with it only, and HelloInitiator reads the
// name the responder chooses the key by. The pair key is a golden vector.
func TestPairKey(t *testing.T) {
	psk := testKey(t)
	a, b, c := fixedAgentKey(t, 0x01), fixedAgentKey(t, 0x41), fixedAgentKey(t, 0x81)
	const ini, resp = "agent-clemson", "agent-utah"
	atInitiator := pairOf(t, psk, a, b.Public(), ini, resp)
	atResponder := pairOf(t, psk, b, a.Public(), ini, resp)
	if !atInitiator.Equal(atResponder) {
		t.Fatal("the two agents of a pair derive different keys")
	}
	golden(t, "pair-auth", atInitiator.auth[:])
	if impostor := pairOf(t, psk, c, b.Public(), ini, resp); impostor.Equal(atResponder) {
		t.Error("a third agent derives the pair's key")
	}
	if reverse := pairOf(t, psk, a, b.Public(), resp, ini); reverse.Equal(atInitiator) {
		t.Error("the streams the other way share the pair's key")
	}
	otherPSK, err := NewHandshakeKey(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if other := pairOf(t, otherPSK, a, b.Public(), ini, resp); other.Equal(atInitiator) {
		t.Error("another PSK gives the same pair key")
	}
	if atInitiator.Equal(psk) {
		t.Error("the pair key is the PSK's")
	}

	h := fixedHello()
	hb, err := h.Marshal(atInitiator)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := HelloInitiator(hb[:]); err != nil || name != ini {
		t.Errorf("HelloInitiator: %q, %v; want %q", name, err, ini)
	}
	if _, err := ParseHello(hb[:], atResponder); err != nil {
		t.Errorf("the responder's pair key does not open the hello: %v", err)
	}
	for name, k := range map[string]*HandshakeKey{"the PSK alone": psk, "a third agent's": pairOf(t, psk, c, b.Public(), ini, resp)} {
		if _, err := ParseHello(hb[:], k); !errors.Is(err, ErrMAC) {
			t.Errorf("%s key opens a hello of the pair: %v", name, err)
		}
	}
	if _, err := psk.Pair(a, PublicKey{}, ini, resp); err == nil {
		t.Error("a low-order (all-zero) public key was taken")
	}
	if _, err := NewAgentKey(make([]byte, AgentKeySize-1)); err == nil {
		t.Error("a short private key was taken")
	}
	if _, err := HelloInitiator(hb[:HelloSize-1]); err == nil {
		t.Error("HelloInitiator read a short hello")
	}
}

// TestCheckAgentPublicKey: a generated public key passes; the same key
// with its top bit set, values of the field's prime and above (which
// X25519 reads as small ones), and points of small order (0, 1, p-1) are
// refused.
func TestCheckAgentPublicKey(t *testing.T) {
	good := fixedAgentKey(t, 0x41).Public()
	if err := CheckAgentPublicKey(good[:]); err != nil {
		t.Fatalf("a generated key: %v", err)
	}
	top := good
	top[31] |= 0x80
	prime := bytes.Repeat([]byte{0xff}, 32)
	prime[0], prime[31] = 0xed, 0x7f // 2^255 - 19
	primePlus1 := bytes.Clone(prime)
	primePlus1[0] = 0xee
	minusOne := bytes.Clone(prime)
	minusOne[0] = 0xec // p - 1: canonical, a point of small order
	one := make([]byte, 32)
	one[0] = 1
	for name, k := range map[string][]byte{
		"top bit set": top[:], "the prime": prime, "the prime plus one": primePlus1,
		"zero": make([]byte, 32), "one (small order)": one, "p-1 (small order)": minusOne, "short": good[:31],
	} {
		if err := CheckAgentPublicKey(k); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}
