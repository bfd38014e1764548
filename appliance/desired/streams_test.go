package desired

import "testing"

// TestAutoStreamsReachRoutes: a whitelist of streams = "auto" compiles to
// routes whose shape is its maximum, marked AutoStreams, at both agents
// (the far side takes the same maximum as the session's shape).
func TestAutoStreamsReachRoutes(t *testing.T) {
	cfg := loadExample(t)
	w := cfg.Whitelists[0]
	w.AutoStreams, w.Streams = true, 32
	for _, node := range []string{"agent-clemson", "agent-utah"} {
		d, err := Compile(cfg, node)
		if err != nil {
			t.Fatal(err)
		}
		rc := d.Agents[0].Relay
		found := 0
		for _, r := range append(rc.Client, rc.Server...) {
			if r.Name != w.Name {
				if r.AutoStreams {
					t.Errorf("%s: route %s is auto", node, r.Name)
				}
				continue
			}
			found++
			if !r.AutoStreams || r.Streams != 32 {
				t.Errorf("%s: route %s streams %d auto %v, want 32 and auto", node, r.Name, r.Streams, r.AutoStreams)
			}
		}
		if found == 0 {
			t.Errorf("%s has no route of %s", node, w.Name)
		}
	}
}
