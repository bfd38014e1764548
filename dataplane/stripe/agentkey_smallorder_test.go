package stripe

import (
	"bytes"
	"crypto/ecdh"
	"errors"
	"math/big"
	"slices"
	"testing"
)

// littleEndian is the 32-byte little-endian encoding of the decimal v.
func littleEndian(t *testing.T, v string) []byte {
	t.Helper()
	n, ok := new(big.Int).SetString(v, 10)
	if !ok {
		t.Fatalf("bad number %s", v)
	}
	b := n.FillBytes(make([]byte, 32))
	slices.Reverse(b)
	return b
}

// TestEverySmallOrderPointRefused: all canonical u-coordinates of
// points of small order on Curve25519 and its twist (0; 1 and p-1 of
// order 4; the two of order 8), and their non-canonical spellings below
// 2^256 (p, p+1, the top bit set on each), are refused by
// CheckAgentPublicKey; generated keys are taken.
func TestEverySmallOrderPointRefused(t *testing.T) {
	const p = "57896044618658097711785492504343953926634992332820282019728792003956564819949"
	small := map[string][]byte{
		"0":       littleEndian(t, "0"),
		"1":       littleEndian(t, "1"),
		"p-1":     littleEndian(t, "57896044618658097711785492504343953926634992332820282019728792003956564819948"),
		"order 8": littleEndian(t, "325606250916557431795983626356110631294008115727848805560023387167927233504"),
		"order 8'": littleEndian(t,
			"39382357235489614581723060781553021112529911719440698176882885853963445705823"),
		"p":   littleEndian(t, p),
		"p+1": littleEndian(t, "57896044618658097711785492504343953926634992332820282019728792003956564819950"),
	}
	probe, _ := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{0x33}, 32))
	for name, k := range small {
		// Premise: X25519 agreement with it fails (all zero) for the
		// canonical ones, which really are of small order.
		if pk, err := ecdh.X25519().NewPublicKey(k); err == nil {
			if _, err := probe.ECDH(pk); err == nil {
				t.Fatalf("premise: %s agrees a nonzero secret", name)
			}
		}
		if err := CheckAgentPublicKey(k); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want refused", name, err)
		}
		top := bytes.Clone(k)
		top[31] |= 0x80
		if err := CheckAgentPublicKey(top); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s with the top bit: %v, want refused", name, err)
		}
	}
	for i := range 64 {
		k := fixedAgentKey(t, byte(i+1)).Public()
		if err := CheckAgentPublicKey(k[:]); err != nil {
			t.Errorf("generated key %d: %v", i, err)
		}
	}
}
