package desired

// The session pin at the opener's site (pins_bothways_test.go) on Open
// vSwitch, with ofproto/trace (review, helper-111).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

var r111OutputRE = regexp.MustCompile(`(?m)^\s+output:(\d+)|^\s+NORMAL`)

// TestPinOnOVSAtTheOpenersSite: agent a2 was down while a1 took the
// connection 10.1.0.20:50000 -> 10.2.0.10:50002 (both ports in the range of
// a direction = "both" whitelist); a2 is back and a1 reports the session.
// Open vSwitch, given the flows the controller then installs, sends the
// opener's segments to a2 (port 4), which holds no socket for them.
func TestPinOnOVSAtTheOpenersSite(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", "spread {\n  mode = \"port\"\n  bits = 4\n}", 1) + r111Both
	sw := r111Switches(t, src)["sw-a"]
	opener, listener := ap("10.1.0.20:50000"), ap("10.2.0.10:50002")
	if v := t0Lookup(r111Flows(t, sw, []string{"a2"}, nil), t0Packet{1, opener, listener}); t0OutPort(v.actions) != 3 {
		t.Fatalf("with a2 down the session goes %s", v.actions)
	}
	fs := r111Flows(t, sw, nil, map[string][]flows.Held{"a1": {{Whitelist: "gridftp", Client: opener, Server: listener}}})
	inst := ovstest.Start(t)
	br := inst.AddBridge(t, "br-a", 1)
	for _, p := range []struct {
		name string
		port uint32
	}{{"ha", 1}, {"a1", 3}, {"a2", 4}} {
		if _, err := inst.Vsctl("--timeout=20", "add-port", br.Name, p.name, "--", "set", "interface", p.name, "type=internal",
			fmt.Sprintf("ofport_request=%d", p.port)); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	file := filepath.Join(inst.Dir, "br-a.flows")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := br.Ofctl("add-flows", file); err != nil {
		t.Fatalf("add-flows: %v: %s", err, out)
	}
	flow := fmt.Sprintf("in_port=1,tcp,nw_src=%s,nw_dst=%s,tp_src=%d,tp_dst=%d", opener.Addr(), listener.Addr(), opener.Port(), listener.Port())
	out, err := inst.Appctl("ofproto/trace", br.Name, flow)
	if err != nil {
		t.Fatalf("trace: %v: %s", err, out)
	}
	m := r111OutputRE.FindStringSubmatch(out)
	if m == nil || m[1] != "3" {
		t.Errorf("after a2's return Open vSwitch sends a1's live session %s -> %s to %v, not a1 (port 3); no pin was made:\n%s", opener, listener, m, out)
	}
}
