package config

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"strings"
	"testing"
)

// keyLines is a public_key line for every agent of twoAgentSites, each
// a real X25519 public key; over replaces some of them.
func keyLines(t *testing.T, over map[string]string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for i, name := range []string{"a1", "a2", "b1", "b2"} {
		priv := bytes.Repeat([]byte{byte(0x10 + i)}, 32)
		k, err := ecdh.X25519().NewPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = `public_key = "` + base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()) + `"`
	}
	for name, line := range over {
		keys[name] = line
	}
	return keys
}

func diagsOf(t *testing.T, src string) (string, bool) {
	t.Helper()
	_, diags := parseString(t, src)
	var b bytes.Buffer
	WriteDiagnostics(&b, diags, []byte(src))
	return b.String(), diags.HasErrors()
}

// TestLowOrderPublicKeyRefused: a public_key that is a point of
// small order (here u = 1; any of the eight low-order points) is no key:
// every X25519 agreement with it is all zero, which crypto/ecdh refuses,
// so the relay of every other agent (whose PeerKeys hold it) would fail
// to build at the daemon's load, fleet-wide: `validate` refuses it.
// (Found by review: only the all-zero encoding was refused.)
func TestLowOrderPublicKeyRefused(t *testing.T) {
	one := make([]byte, 32)
	one[0] = 1
	// Sanity: X25519 refuses agreement with it.
	priv, _ := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{7}, 32))
	pk, err := ecdh.X25519().NewPublicKey(one)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := priv.ECDH(pk); err == nil {
		t.Fatal("u = 1 is not refused by X25519 agreement: the test's premise is wrong")
	}
	src := withKeys(twoAgentSites(""), keyLines(t, map[string]string{
		"a1": `public_key = "` + base64.StdEncoding.EncodeToString(one) + `"`,
	}))
	out, bad := diagsOf(t, src)
	if !bad {
		t.Errorf("a low-order public_key (u = 1) passes validation; every other agent's relay then fails to start "+
			"(X25519 agreement with it is all zero). Diagnostics:\n%s", out)
	}
}

// TestNonCanonicalDuplicateKey: X25519 ignores the top bit of a
// public key, so the same key has two base64 spellings, for which every
// peer derives the same pair secrets: a1's key with the top bit set,
// given to a2, would let the holder of a1's private key pass for a2. Only
// the canonical encoding is taken (and an agent whose key is refused is
// not also reported as having none). (Found by review: the duplicate
// check compared the bytes as written.)
func TestNonCanonicalDuplicateKey(t *testing.T) {
	keys := keyLines(t, nil)
	a1 := strings.TrimSuffix(strings.TrimPrefix(keys["a1"], `public_key = "`), `"`)
	raw, err := base64.StdEncoding.DecodeString(a1)
	if err != nil {
		t.Fatal(err)
	}
	raw[31] |= 0x80
	// Sanity: the two spellings agree the same secret.
	priv, _ := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{9}, 32))
	p1, _ := ecdh.X25519().NewPublicKey(func() []byte { b := bytes.Clone(raw); b[31] &^= 0x80; return b }())
	p2, _ := ecdh.X25519().NewPublicKey(raw)
	s1, _ := priv.ECDH(p1)
	s2, _ := priv.ECDH(p2)
	if !bytes.Equal(s1, s2) {
		t.Fatal("premise: the top bit changes the agreement")
	}
	keys["a2"] = `public_key = "` + base64.StdEncoding.EncodeToString(raw) + `"`
	out, bad := diagsOf(t, withKeys(twoAgentSites(""), keys))
	if !bad || !strings.Contains(out, "not in its canonical encoding") || strings.Contains(out, "has no public_key") {
		t.Errorf("a2's public_key is a1's with the (ignored) top bit set: want it refused as a duplicate (or as not canonical), got:\n%s", out)
	}
}

// TestKeyFileIsPSKFile: key_file naming the PSK's file is
// refused. (Found by review: it passed validation, and the daemon's hints
// then led to deleting the PSK.)
func TestKeyFileIsPSKFile(t *testing.T) {
	keys := keyLines(t, nil)
	keys["a1"] += "\nkey_file = \"/etc/psk\""
	out, bad := diagsOf(t, withKeys(twoAgentSites(""), keys))
	if !bad {
		t.Errorf("key_file = psk_file (/etc/psk) passes validation:\n%s", out)
	}
}
