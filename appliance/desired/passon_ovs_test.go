package desired

// The agents send on what the switches steer to them and no relay socket
// owns: checked on Open vSwitch (userspace datapath) with the flows the
// controller compiles, the steering tables the agents' nodes apply, and
// real TCP between network namespaces.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"github.com/sosappliance/sosappliance/tuning"
)

// passOnSites is two sites of one agent each: site a's hosts are
// 10.1.0.0/24 (agent ag-a on port 3), site b's 10.2.0.0/24 (agent ag-b on
// port 7). The agents' interface is eth0, as ovstest names a host's.
const passOnSites = `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "ag-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "10.1.0.2"
    interface = "eth0"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "ag-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 7
    mac = "02:00:00:00:00:02"
    address = "10.2.0.2"
    interface = "eth0"
  }
}
whitelist "gridftp" {
  clients      = ["10.1.0.0/24"]
  servers      = ["10.2.0.16/28"]
  server_ports = ["2811", "50000-51000"]
}
`

// installFlows writes a switch's compiled flows onto a bridge.
func installFlows(t *testing.T, inst *ovstest.Instance, br *ovstest.Bridge, fs []flows.Flow) {
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

// applySteering applies the steering items (and the agent interface's
// rp_filter) that node's desired state holds, inside the host's namespace.
func applySteering(t *testing.T, cfgSrc, node string, h *ovstest.Host) {
	t.Helper()
	d, err := Compile(parse(t, cfgSrc), node)
	if err != nil {
		t.Fatal(err)
	}
	steer, sysctl := tuning.NewSteering(), tuning.NewSysctl("/")
	n := 0
	if err := h.InNamespace(func() error {
		for _, it := range d.Items {
			var err error
			switch {
			case it.Kind == item.KindSteering:
				err = steer.Apply(context.Background(), it)
			case it.Kind == item.KindSysctl && strings.HasSuffix(it.Key, ".rp_filter"):
				err = sysctl.Apply(context.Background(), it)
			default:
				continue
			}
			if err != nil {
				return fmt.Errorf("apply %s: %w", it.ID(), err)
			}
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("node %s: applied %d steering items, want the table, rule, route and rp_filter", node, n)
	}
}

// A server host opens a connection to a client host from a port inside the
// whitelist's range (here one Linux hands out from its ephemeral range).
// The server site's switch steers its packets to the server-side agent as
// if they were replies, and the client site's switch steers the client's
// answers to the client-side agent as if they opened a connection. Each
// agent sends them on, and the connection carries data both ways. Before,
// the server-side agent dropped the SYN (no relay socket, no forwarding)
// and the connection never completed; the client-side agent, had it got
// one, would have answered the client's SYN-ACK with a reset from its
// listener.
func TestServerOpenedConnectionFromRangePortPassesTheAgents(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	d, err := Compile(parse(t, passOnSites), "ctl")
	if err != nil {
		t.Fatal(err)
	}
	sws := map[string][]flows.Flow{}
	for _, sw := range d.Controller.Switches {
		fs, err := flows.Compile(sw)
		if err != nil {
			t.Fatalf("compile %s: %v", sw.Name, err)
		}
		sws[sw.Name] = fs
	}
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
	addr := netip.MustParseAddr
	client := brA.AttachHost(t, 1, mac("02:00:00:00:01:05"), netip.MustParsePrefix("10.1.0.5/8"))
	agentA := brA.AttachHost(t, 3, mac("02:00:00:00:00:01"), netip.MustParsePrefix("10.1.0.2/8"))
	server := brB.AttachHost(t, 1, mac("02:00:00:00:02:14"), netip.MustParsePrefix("10.2.0.20/8"))
	agentB := brB.AttachHost(t, 7, mac("02:00:00:00:00:02"), netip.MustParsePrefix("10.2.0.2/8"))
	// Permanent neighbours, so nothing depends on ARP through the flows.
	for _, n := range []struct {
		h    *ovstest.Host
		addr string
		to   *ovstest.Host
	}{{client, "10.2.0.20", server}, {server, "10.1.0.5", client}, {agentA, "10.2.0.20", server},
		{agentA, "10.1.0.5", client}, {agentB, "10.1.0.5", client}, {agentB, "10.2.0.20", server}} {
		if err := n.h.Neighbor(addr(n.addr), n.to.MAC); err != nil {
			t.Fatal(err)
		}
	}
	installFlows(t, inst, brA, sws["sw-a"])
	installFlows(t, inst, brB, sws["sw-b"])
	applySteering(t, passOnSites, "na", agentA)
	applySteering(t, passOnSites, "nb", agentB)
	for _, h := range []*ovstest.Host{agentA, agentB} {
		if out, err := h.Exec("sysctl", "-n", "net.ipv4.ip_forward"); err != nil || strings.TrimSpace(out) != "0" {
			t.Fatalf("agent namespace forwards (%q, %v); the test needs it not to", out, err)
		}
	}

	var ln net.Listener
	if err := client.InNamespace(func() error {
		var err error
		ln, err = net.Listen("tcp4", "10.1.0.5:22")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The client host echoes one line per connection.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 64)
				n, err := c.Read(b)
				if err == nil {
					_, _ = c.Write(b[:n])
				}
			}()
		}
	}()
	exchange := func(sport int) error {
		return server.InNamespace(func() error {
			dl := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(10, 2, 0, 20), Port: sport}}
			c, err := dl.Dial("tcp4", "10.1.0.5:22")
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			msg := fmt.Sprintf("hello from port %d\n", sport)
			if _, err := io.WriteString(c, msg); err != nil {
				return err
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil {
				return fmt.Errorf("echo: %w", err)
			}
			if string(got) != msg {
				return fmt.Errorf("echo %q, want %q", got, msg)
			}
			return nil
		})
	}
	if err := exchange(40000); err != nil {
		t.Fatalf("control: server -> client:22 from port 40000, which no flow steers: %v", err)
	}
	// The agents' switch ports count the packets steered to them (tx)
	// and those they sent on (rx).
	agentPorts := []struct {
		br   *ovstest.Bridge
		port uint32
	}{{brA, 3}, {brB, 7}}
	counts := func() [][2]int {
		var out [][2]int
		for _, c := range agentPorts {
			s, err := c.br.Ofctl("dump-ports", fmt.Sprint(c.port))
			if err != nil {
				t.Fatal(err)
			}
			m := portPacketsRE.FindAllStringSubmatch(s, -1)
			if len(m) != 2 {
				t.Fatalf("dump-ports %s %d: %s", c.br.Name, c.port, s)
			}
			rx, _ := strconv.Atoi(m[0][1])
			tx, _ := strconv.Atoi(m[1][1])
			out = append(out, [2]int{rx, tx})
		}
		return out
	}
	before := counts()
	ports := []int{50123, 2811, 51000}
	for _, sport := range ports {
		if err := exchange(sport); err != nil {
			var ne net.Error
			t.Errorf("server -> client:22 from port %d, inside the whitelist's ports (timeout %v): %v",
				sport, errors.As(err, &ne) && ne.Timeout(), err)
		}
	}
	after := counts()
	// Each exchange is at least SYN, ACK, data and FIN from either end:
	// four packets each way through each agent.
	for i, c := range agentPorts {
		rx, tx := after[i][0]-before[i][0], after[i][1]-before[i][1]
		t.Logf("%s agent port %d: %d packets steered to the agent, %d sent on", c.br.Name, c.port, tx, rx)
		if tx < 4*len(ports) || rx < 4*len(ports) {
			t.Errorf("%s agent port %d: %d packets steered to the agent and %d sent on, want at least %d each",
				c.br.Name, c.port, tx, rx, 4*len(ports))
		}
	}
}

var portPacketsRE = regexp.MustCompile(`[rt]x pkts=(\d+)`)
