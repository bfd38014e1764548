//go:build review107

// Reproductions by review (helper-107) of open defects in steering and the
// choice of far agent (the note lists them): run with
// go test -tags review107 -run Review107. Most of these fail until the
// defects are fixed; the ones that pass check properties that held.

package desired

// Review 107: the compiled flows on Open vSwitch (userspace datapath),
// checked with ofproto/trace and with real TCP between network namespaces.

import (
	"fmt"
	"net/netip"
	"regexp"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// r107InternalPort adds an internal port with a fixed OpenFlow number, for
// traces.
func r107InternalPort(t *testing.T, inst *ovstest.Instance, br *ovstest.Bridge, name string, ofport uint32) {
	t.Helper()
	if _, err := inst.Vsctl("--timeout=20", "add-port", br.Name, name, "--", "set", "interface", name, "type=internal",
		fmt.Sprintf("ofport_request=%d", ofport)); err != nil {
		t.Fatal(err)
	}
}

var r107OutputRE = regexp.MustCompile(`(?m)^\s+output:(\d+)|^\s+NORMAL`)

// r107Trace is where Open vSwitch sends a TCP segment: "port N" or
// "NORMAL", with the whole trace for the log.
func r107Trace(t *testing.T, inst *ovstest.Instance, br string, inPort int, src, dst netip.AddrPort) (string, string) {
	t.Helper()
	proto, s, d := "tcp", "nw_src", "nw_dst"
	if src.Addr().Is6() {
		proto, s, d = "tcp6", "ipv6_src", "ipv6_dst"
	}
	flow := fmt.Sprintf("in_port=%d,%s,%s=%s,%s=%s,tp_src=%d,tp_dst=%d", inPort, proto, s, src.Addr(), d, dst.Addr(), src.Port(), dst.Port())
	out, err := inst.Appctl("ofproto/trace", br, flow)
	if err != nil {
		t.Fatalf("trace %s: %v: %s", flow, err, out)
	}
	m := r107OutputRE.FindStringSubmatch(out)
	switch {
	case m == nil:
		return "?", out
	case m[1] != "":
		return "port " + m[1], out
	}
	return "NORMAL", out
}

// TestReview107OVSTraceTies installs the flows of the direction = "both"
// range whitelist with two agents per site on two bridges and asks Open
// vSwitch where the server's replies of client-opened connections go, for
// client ports inside the range: the relay at the client site dials the
// server-site agent of the client port's bucket, so that is where the
// replies must go.
func TestReview107OVSTraceTies(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	sws := compiledSwitches(t, twoAgentsPerSite+`
whitelist "gridftp" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_ports = ["50000-50031"]
  direction    = "both"
}`)
	inst := ovstest.Start(t)
	brA := inst.AddBridge(t, "br-a", 1)
	brB := inst.AddBridge(t, "br-b", 2)
	for _, p := range []struct {
		br   *ovstest.Bridge
		name string
		port uint32
	}{{brA, "ha", 1}, {brA, "a1", 3}, {brA, "a2", 4}, {brB, "hb", 1}, {brB, "b1", 7}, {brB, "b2", 8}} {
		r107InternalPort(t, inst, p.br, p.name, p.port)
	}
	installFlows(t, inst, brA, sws["sw-a"])
	installFlows(t, inst, brB, sws["sw-b"])
	b, _ := spread.Assign(spread.ModePort, 4, 2, nil)
	serverAgentPort := []string{"port 7", "port 8"}
	wrong := 0
	for cport := uint16(50000); cport < 50032; cport += 2 {
		client := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.5"), cport)
		server := ap("10.2.0.10:50000")
		want := serverAgentPort[b.Agent(client)]
		got, trace := r107Trace(t, inst, "br-b", 1, server, client)
		if got != want {
			wrong++
			if wrong == 1 {
				t.Logf("trace:\n%s", trace)
			}
			t.Errorf("reply %s -> %s: Open vSwitch sends it to %s, but the client-side agent dialed the agent on %s", server, client, got, want)
		}
	}
	// A client port outside the range has no tie: the control.
	client := ap("10.1.0.5:40002")
	if got, _ := r107Trace(t, inst, "br-b", 1, ap("10.2.0.10:50000"), client); got != serverAgentPort[b.Agent(client)] {
		t.Errorf("control: reply to %s goes to %s", client, got)
	}
}
