package ovstest

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Bridge is an OVS bridge on the userspace datapath with fail_mode=secure,
// speaking OpenFlow 1.3 only.
type Bridge struct {
	Name       string
	DatapathID uint64
	inst       *Instance
}

// AddBridge creates a bridge; the name must be unique on the machine only
// within this instance, since the bridge lives in the instance's namespace.
// Controllers are OVS targets such as "tcp:127.0.0.1:6653" or
// "ptcp:6653:127.0.0.1"; more can be set later with SetControllers.
func (i *Instance) AddBridge(t testing.TB, name string, datapathID uint64, controllers ...string) *Bridge {
	t.Helper()
	args := []string{"--timeout=20", "add-br", name,
		"--", "set", "bridge", name, "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13",
		fmt.Sprintf("other_config:datapath-id=%016x", datapathID),
		// No in-band control: the controller is reached out of band and
		// in-band hidden flows would show up in counters and captures.
		"other_config:disable-in-band=true"}
	if _, err := i.Vsctl(args...); err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	b := &Bridge{Name: name, DatapathID: datapathID, inst: i}
	if len(controllers) > 0 {
		if err := b.SetControllers(controllers...); err != nil {
			t.Fatalf("ovstest: %v", err)
		}
	}
	return b
}

// SetControllers replaces the controller targets of the bridge.
func (b *Bridge) SetControllers(targets ...string) error {
	if len(targets) == 0 {
		_, err := b.inst.Vsctl("del-controller", b.Name)
		return err
	}
	args := append([]string{"--timeout=20", "set-controller", b.Name}, targets...)
	if _, err := b.inst.Vsctl(args...); err != nil {
		return err
	}
	for _, target := range targets {
		ids, err := b.inst.Vsctl("--bare", "--columns=_uuid", "find", "controller", "target="+strconv.Quote(target))
		if err != nil {
			return err
		}
		for _, id := range strings.Fields(ids) {
			// Reconnect within a second instead of OVS's default 8 s backoff.
			if _, err := b.inst.Vsctl("--timeout=20", "set", "controller", id, "max_backoff=1000"); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddPort plugs an interface that already exists in the instance's
// namespace (e.g. one end of a veth pair made with inst.Exec("ip", ...)
// to link two bridges) into the bridge as OpenFlow port ofport.
func (b *Bridge) AddPort(iface string, ofport uint32) error {
	_, err := b.inst.Vsctl("--timeout=20", "add-port", b.Name, iface,
		"--", "set", "interface", iface, fmt.Sprintf("ofport_request=%d", ofport))
	return err
}

// Connected reports whether OVS considers the bridge connected to at least
// one of its controllers.
func (b *Bridge) Connected() (bool, error) {
	out, err := b.inst.Vsctl("--bare", "--columns=is_connected", "find", "controller")
	if err != nil {
		return false, err
	}
	return strings.Contains(out, "true"), nil
}

// Ofctl runs ovs-ofctl -O OpenFlow13 CMD BRIDGE ARGS... on this bridge.
func (b *Bridge) Ofctl(cmd string, args ...string) (string, error) {
	return b.inst.Ofctl(append([]string{cmd, b.Name}, args...)...)
}

// AddFlow installs a flow written in ovs-ofctl syntax.
func (b *Bridge) AddFlow(flow string) error {
	_, err := b.Ofctl("add-flow", flow)
	return err
}

// DumpFlows returns the flow table as ovs-ofctl dump-flows prints it.
func (b *Bridge) DumpFlows() ([]DumpedFlow, error) {
	out, err := b.Ofctl("dump-flows")
	if err != nil {
		return nil, err
	}
	return ParseDumpFlows(out)
}

// Host is a network namespace with one veth interface plugged into a bridge
// port: a client, a server or an agent in a test topology.
type Host struct {
	// Namespace is the host's network namespace.
	Namespace string
	// Interface is the veth end inside Namespace; BridgePort is its peer,
	// a port of the bridge with the OpenFlow number OFPort.
	Interface  string
	BridgePort string
	OFPort     uint32
	MAC        net.HardwareAddr
	Addr       netip.Prefix
}

// AttachHost creates a namespace with a veth whose peer becomes port ofport
// of the bridge, gives it the MAC and address, turns off checksum offload
// on both ends (the userspace datapath forwards packets as they are, so a
// partial checksum would reach the receiver unfinished) and removes it all
// when the test ends.
func (b *Bridge) AttachHost(t testing.TB, ofport uint32, mac net.HardwareAddr, addr netip.Prefix) *Host {
	t.Helper()
	h := &Host{
		Namespace:  UniqueName("h"),
		Interface:  "eth0",
		BridgePort: UniqueName("p"),
		OFPort:     ofport,
		MAC:        mac,
		Addr:       addr,
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.Namespace).Run() })
	steps := [][]string{
		{"ip", "netns", "add", h.Namespace},
		{"ip", "link", "add", h.BridgePort, "netns", b.inst.Namespace, "type", "veth", "peer", "name", h.Interface, "netns", h.Namespace},
		{"ip", "-n", h.Namespace, "link", "set", "lo", "up"},
		// No IPv6: its router solicitations and MLD reports would flood
		// every port and blur packet counts.
		{"ip", "netns", "exec", h.Namespace, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"},
		{"ip", "netns", "exec", h.Namespace, "sysctl", "-qw", "net.ipv6.conf." + h.Interface + ".disable_ipv6=1"},
		{"ip", "-n", h.Namespace, "link", "set", h.Interface, "address", mac.String()},
		{"ip", "-n", h.Namespace, "addr", "add", addr.String(), "dev", h.Interface},
		{"ip", "-n", h.Namespace, "link", "set", h.Interface, "up"},
		{"ip", "-n", b.inst.Namespace, "link", "set", h.BridgePort, "up"},
		{"ip", "netns", "exec", h.Namespace, "ethtool", "-K", h.Interface, "tx", "off"},
		{"ip", "netns", "exec", b.inst.Namespace, "ethtool", "-K", h.BridgePort, "tx", "off"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("ovstest: %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	if _, err := b.inst.Vsctl("--timeout=20", "add-port", b.Name, h.BridgePort,
		"--", "set", "interface", h.BridgePort, fmt.Sprintf("ofport_request=%d", ofport)); err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	return h
}

// Exec runs a command inside the host's namespace.
func (h *Host) Exec(name string, args ...string) (string, error) {
	c := exec.Command("ip", append([]string{"netns", "exec", h.Namespace, name}, args...)...)
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), h.Namespace, err, out)
	}
	return string(out), nil
}

// InNamespace runs fn on an OS thread switched into the host's namespace;
// sockets it opens live there.
func (h *Host) InNamespace(fn func() error) error { return inNamespace(h.Namespace, fn) }

// Neighbor adds a permanent ARP entry so a test does not depend on ARP.
func (h *Host) Neighbor(addr netip.Addr, mac net.HardwareAddr) error {
	_, err := h.Exec("ip", "neigh", "replace", addr.String(), "lladdr", mac.String(), "dev", h.Interface, "nud", "permanent")
	return err
}
