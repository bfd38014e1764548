package config

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// torsionTwin returns u(P + T2) = 1/u mod p for the little-endian
// u-coordinate pub: P plus the point of order 2, (0, 0), on Curve25519
// (a Montgomery curve with B = 1). X25519 clamps every private key to a
// multiple of 8, so every agreement with it equals the one with pub.
func torsionTwin(t *testing.T, pub []byte) []byte {
	t.Helper()
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	u := new(big.Int).SetBytes(reversed(pub))
	inv := new(big.Int).ModInverse(u, p)
	if inv == nil {
		t.Fatal("u has no inverse")
	}
	be := inv.FillBytes(make([]byte, 32))
	return reversed(be)
}

func reversed(b []byte) []byte {
	r := slices.Clone(b)
	slices.Reverse(r)
	return r
}

// TestTorsionVariantIsADuplicateKey: X25519 reads u and 1/u (the
// key plus the point of order 2) as one key: every agreement with either
// is the same, so the holder of a1's private key derives the pair keys of
// a2 (with b1, b2, ...) and would pass for a2. 1/u is canonical and not
// of small order, so ParseAgentPublicKey takes it; the duplicate check
// compares keys by what their agreements give (stripe.AgentKeyClass), so
// a1's key written this way is refused as a2's. (Found by review: it
// compared the bytes, which left the 7 other spellings of every key, P +
// T for T of order 2, 4 and 8, open.)
func TestTorsionVariantIsADuplicateKey(t *testing.T) {
	keys := keyLines(t, nil)
	a1 := strings.TrimSuffix(strings.TrimPrefix(keys["a1"], `public_key = "`), `"`)
	raw, err := base64.StdEncoding.DecodeString(a1)
	if err != nil {
		t.Fatal(err)
	}
	twin := torsionTwin(t, raw)
	if bytes.Equal(twin, raw) {
		t.Fatal("premise: 1/u equals u")
	}
	// Premise 1: the twin passes the checks of a single key.
	if err := stripe.CheckAgentPublicKey(twin); err != nil {
		t.Fatalf("premise: the twin is refused by itself: %v", err)
	}
	// Premise 2: whoever holds a1's private key derives the key with
	// which b1 checks a2's hellos, once a2's public_key is the twin.
	psk, err := stripe.NewHandshakeKey(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		t.Fatal(err)
	}
	a1priv, err := stripe.NewAgentKey(bytes.Repeat([]byte{0x10}, 32)) // keyLines: a1 is index 0
	if err != nil {
		t.Fatal(err)
	}
	if got := a1priv.Public(); !bytes.Equal(got[:], raw) {
		t.Fatalf("premise: a1 private key in keyLines is not 0x10...: %x vs %x", got, raw)
	}
	b1priv, err := stripe.NewAgentKey(bytes.Repeat([]byte{0x77}, 32))
	if err != nil {
		t.Fatal(err)
	}
	var twinPub stripe.PublicKey
	copy(twinPub[:], twin)
	b1Checks, err := psk.Pair(b1priv, twinPub, "a2", "b1") // b1's key for a2's streams
	if err != nil {
		t.Fatal(err)
	}
	forged, err := psk.Pair(a1priv, b1priv.Public(), "a2", "b1") // a1's holder, naming itself a2
	if err != nil {
		t.Fatal(err)
	}
	if !b1Checks.Equal(forged) {
		t.Fatal("premise: the holder of a1's key does not derive a2's pair key")
	}
	// Sanity with crypto/ecdh directly, for any private key.
	priv, _ := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{9}, 32))
	p1, _ := ecdh.X25519().NewPublicKey(raw)
	p2, _ := ecdh.X25519().NewPublicKey(twin)
	s1, _ := priv.ECDH(p1)
	s2, _ := priv.ECDH(p2)
	if !bytes.Equal(s1, s2) {
		t.Fatal("premise: u and 1/u agree different secrets")
	}

	keys["a2"] = `public_key = "` + base64.StdEncoding.EncodeToString(twin) + `"`
	out, bad := diagsOf(t, withKeys(twoAgentSites(""), keys))
	if !bad {
		t.Errorf("a2's public_key is a1's plus the point of order 2 (1/u, every agreement the same as with a1's): "+
			"validation passes, and the holder of a1's private key can pass for a2. Diagnostics:\n%s", out)
	}
}

// TestKeyFileIsPSKFileSpelledOtherwise: key_file naming the
// psk_file by another spelling of the same absolute path (a doubled
// slash, a "." or ".." component) is refused as the same spelling is.
// (Found by review: the paths were compared as written.)
func TestKeyFileIsPSKFileSpelledOtherwise(t *testing.T) {
	for _, spelling := range []string{"/etc//psk", "/etc/./psk", "/etc/sosappliance/../psk", "//etc/psk"} {
		keys := keyLines(t, nil)
		keys["a1"] += "\nkey_file = \"" + spelling + "\""
		out, bad := diagsOf(t, withKeys(twoAgentSites(""), keys))
		if !bad {
			t.Errorf("key_file = %q, the psk_file /etc/psk spelled otherwise, passes validation:\n%s", spelling, out)
		}
	}
}
