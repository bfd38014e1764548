package config

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// keyOf is a distinct, valid-looking public key for agent n.
func keyOf(n byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{n}, 32))
}

// withKeys puts a public_key line (and extra lines) into each named
// agent's block of twoAgentSites.
func withKeys(src string, keys map[string]string) string {
	for name, lines := range keys {
		src = strings.Replace(src, "agent \""+name+"\" {\n", "agent \""+name+"\" {\n"+lines+"\n", 1)
	}
	return src
}

// TestAgentKeys: public_key and key_file of agent blocks, and what is
// refused, each with the problem named at its place.
func TestAgentKeys(t *testing.T) {
	all := map[string]string{
		"a1": `public_key = "` + keyOf(1) + `"`,
		"a2": `public_key = "` + keyOf(2) + `"` + "\nkey_file = \"/etc/sos/a2.key\"",
		"b1": `public_key = "` + keyOf(3) + `"`,
		"b2": `public_key = "` + keyOf(4) + `"`,
	}
	cfg := mustParse(t, withKeys(twoAgentSites(""), all))
	if a := cfg.Agent("a1"); !bytes.Equal(a.PublicKey, bytes.Repeat([]byte{1}, 32)) || a.KeyFile != DefaultAgentKeyFile {
		t.Errorf("a1: public key %x, key_file %q", a.PublicKey, a.KeyFile)
	}
	if a := cfg.Agent("a2"); a.KeyFile != "/etc/sos/a2.key" {
		t.Errorf("a2: key_file %q", a.KeyFile)
	}
	if a := mustParse(t, twoAgentSites("")).Agent("a1"); a.PublicKey != nil || a.KeyFile != "" {
		t.Errorf("without public_key: %x, %q", a.PublicKey, a.KeyFile)
	}

	bad := []struct {
		name string
		keys map[string]string
		want string
	}{
		{"not base64", map[string]string{"a1": `public_key = "not a key!"`}, `agent "a1" public_key: not base64`},
		{"short", map[string]string{"a1": `public_key = "` + base64.StdEncoding.EncodeToString(make([]byte, 31)) + `"`}, "31 bytes, want 32"},
		{"zero", map[string]string{"a1": `public_key = "` + base64.StdEncoding.EncodeToString(make([]byte, 32)) + `"`}, "small order"},
		{"relative key_file", map[string]string{"a1": `public_key = "` + keyOf(1) + `"` + "\nkey_file = \"agent.key\""}, "key_file must be an absolute path"},
		{"key_file alone", map[string]string{"a1": `key_file = "/etc/k"`}, "key_file without public_key"},
		{"some agents only", map[string]string{"a1": all["a1"], "b1": all["b1"]}, `Agent "a2" has no public_key`},
		{"a key twice", map[string]string{"a1": all["a1"], "a2": all["a1"], "b1": all["b1"], "b2": all["b2"]}, `has the public_key of agent`},
	}
	for _, c := range bad {
		src := withKeys(twoAgentSites(""), c.keys)
		_, diags := parseString(t, src)
		var b bytes.Buffer
		WriteDiagnostics(&b, diags, []byte(src))
		if !diags.HasErrors() || !strings.Contains(b.String(), c.want) {
			t.Errorf("%s: want a diagnostic saying %q, got:\n%s", c.name, c.want, b.String())
		}
	}
}
