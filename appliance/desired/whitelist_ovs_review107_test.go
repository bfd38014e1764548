//go:build review107

// Reproductions by review (helper-107) of open defects in steering and the
// choice of far agent (the note lists them): run with
// go test -tags review107 -run Review107. Most of these fail until the
// defects are fixed; the ones that pass check properties that held.

package desired

// Review 107: the compiled flows on Open vSwitch (userspace datapath),
// checked with ofproto/trace and with real TCP between network namespaces.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// r107Install writes the compiled flows of a switch onto a bridge.
func r107Install(t *testing.T, inst *ovstest.Instance, br *ovstest.Bridge, fs []flows.Flow) {
	t.Helper()
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	file := filepath.Join(inst.Dir, br.Name+".flows")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := br.Ofctl("add-flows", file); err != nil {
		t.Fatalf("add-flows: %v: %s", err, out)
	}
}

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
	r107Install(t, inst, brA, sws["sw-a"])
	r107Install(t, inst, brB, sws["sw-b"])
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

// TestReview107OVSServerOpenedConnectionBlackholed: the GridFTP-style
// whitelist (clients 10.1.0.0/24, servers 10.2.0.16/28, ports 2811 and
// 50000-51000, direction "client") on two bridges joined by a veth (the
// WAN), a client host and a server host on one L2, and an agent namespace
// on each switch's agent port (no relay: what the kernel of an agent host
// does with a packet that is not for it, ip_forward being 0 as the
// appliance leaves it). The server host opens a TCP connection to the
// client host's port 22, which no whitelist names: from source port 40000
// it connects; from source port 50123, a port Linux's default ephemeral
// range (32768-60999) hands out, the switch steers its SYN to the agent,
// which drops it, and the connection never completes.
func TestReview107OVSServerOpenedConnectionBlackholed(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	sws := compiledSwitches(t, r107Sites+`
whitelist "gridftp" {
  clients      = ["10.1.0.0/24"]
  servers      = ["10.2.0.16/28"]
  server_ports = ["2811", "50000-51000"]
}`)
	inst := ovstest.Start(t)
	brA := inst.AddBridge(t, "br-a", 1)
	brB := inst.AddBridge(t, "br-b", 2)
	wanA, wanB := ovstest.UniqueName("wa"), ovstest.UniqueName("wb")
	if out, err := inst.Exec("ip", "link", "add", wanA, "type", "veth", "peer", "name", wanB); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, l := range []string{wanA, wanB} {
		if out, err := inst.Exec("ip", "link", "set", l, "up"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if out, err := inst.Exec("ethtool", "-K", l, "tx", "off"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	if err := brA.AddPort(wanA, 9); err != nil {
		t.Fatal(err)
	}
	if err := brB.AddPort(wanB, 9); err != nil {
		t.Fatal(err)
	}
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	client := brA.AttachHost(t, 1, mac("02:00:00:00:01:05"), netip.MustParsePrefix("10.1.0.5/8"))
	brA.AttachHost(t, 3, mac("02:00:00:00:00:01"), netip.MustParsePrefix("10.1.0.2/8"))
	server := brB.AttachHost(t, 1, mac("02:00:00:00:02:14"), netip.MustParsePrefix("10.2.0.20/8"))
	brB.AttachHost(t, 7, mac("02:00:00:00:00:02"), netip.MustParsePrefix("10.2.0.2/8"))
	if err := client.Neighbor(netip.MustParseAddr("10.2.0.20"), server.MAC); err != nil {
		t.Fatal(err)
	}
	if err := server.Neighbor(netip.MustParseAddr("10.1.0.5"), client.MAC); err != nil {
		t.Fatal(err)
	}
	r107Install(t, inst, brA, sws["sw-a"])
	r107Install(t, inst, brB, sws["sw-b"])

	var ln net.Listener
	if err := client.InNamespace(func() error {
		var err error
		ln, err = net.Listen("tcp4", "10.1.0.5:22")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := func(sport int) error {
		return server.InNamespace(func() error {
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(10, 2, 0, 20), Port: sport}}
			c, err := d.Dial("tcp4", "10.1.0.5:22")
			if err != nil {
				return err
			}
			return c.Close()
		})
	}
	if err := dial(40000); err != nil {
		t.Fatalf("control: server -> client:22 from port 40000: %v", err)
	}
	got, trace := r107Trace(t, inst, "br-b", 1, ap("10.2.0.20:50123"), ap("10.1.0.5:22"))
	t.Logf("SYN 10.2.0.20:50123 -> 10.1.0.5:22 on br-b: %s", got)
	if err := dial(50123); err != nil {
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		t.Errorf("server host -> client host:22 (no whitelist names it) from ephemeral port 50123 failed (timeout %v): %v; the server site's switch sends its SYN to %s:\n%s", timeout, err, got, trace)
	}
}
