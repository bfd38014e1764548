package desired

import (
	"bytes"
	"maps"
	"slices"
	"testing"
)

// TestCompileAgentKeys: with per-agent keys an agent's relay spec names
// its key file and public key and carries every other agent's public
// key; without them it carries none.
func TestCompileAgentKeys(t *testing.T) {
	cfg := loadExample(t)
	if d, err := Compile(cfg, "agent-clemson"); err != nil || d.Agents[0].Relay.PeerKeys != nil || d.Agents[0].Relay.AgentKeyFile != "" {
		t.Fatalf("without public keys: %v, %+v", err, d.Agents[0].Relay)
	}
	for i, name := range []string{"agent-clemson", "agent-utah"} {
		a := cfg.Agent(name)
		a.PublicKey, a.KeyFile = bytes.Repeat([]byte{byte(i + 1)}, 32), "/etc/sos/"+name+".key"
	}
	d, err := Compile(cfg, "agent-clemson")
	if err != nil {
		t.Fatal(err)
	}
	r := d.Agents[0].Relay
	if r.AgentKeyFile != "/etc/sos/agent-clemson.key" || !bytes.Equal(r.PublicKey, bytes.Repeat([]byte{1}, 32)) {
		t.Errorf("own key: file %q, public %x", r.AgentKeyFile, r.PublicKey)
	}
	if names := slices.Sorted(maps.Keys(r.PeerKeys)); !slices.Equal(names, []string{"agent-utah"}) ||
		!bytes.Equal(r.PeerKeys["agent-utah"], bytes.Repeat([]byte{2}, 32)) {
		t.Errorf("peer keys: %v", r.PeerKeys)
	}
}
