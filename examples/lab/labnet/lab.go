// Package labnet brings the one-machine lab up and down: network namespaces
// for the client, the server, two agents, the WAN and the switches; veths
// with MTU 9000 and offloads off; a private Open vSwitch with two bridges on
// the userspace datapath in secure fail mode; the WAN emulator between them;
// and the real sosappliance controller and agents running with the lab's
// sos.hcl. Everything it creates is written to a ledger before it is
// created, so Down, a signal handler, `lab down` from another shell or the
// next Up after a crash can always remove all of it.
package labnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

// Host is one of the lab's machines, each a network namespace.
type Host string

// The lab's hosts. The client sits at the first site of the config, the
// server at the second; the switch host runs Open vSwitch and the
// controller.
const (
	Client     Host = "client"
	Server     Host = "server"
	AgentA     Host = "agent-a"
	AgentB     Host = "agent-b"
	WANHost    Host = "wan"
	SwitchHost Host = "switch"
)

var allHosts = []Host{SwitchHost, WANHost, Client, Server, AgentA, AgentB}

// Addresses of the unmodified end hosts and of the controller's leg into
// the lab. All lab hosts share one /16 at layer 2, like the VLAN-stitched
// path of the original SOS trial; each site owns a /24 of it.
var (
	ClientAddr     = netip.MustParseAddr("10.10.1.10")
	ServerAddr     = netip.MustParseAddr("10.10.2.10")
	ControllerAddr = netip.MustParseAddr("10.10.1.1")
)

// PrefixLen is the length of the lab's shared prefix.
const PrefixLen = 16

// MTU of every lab interface: jumbo frames, as on the research networks the
// appliance is for.
const MTU = 9000

// OpenFlow port numbers on each bridge; an agent's port comes from the
// config (switch_port) and must not collide with these.
const (
	hostOFPort    = 1
	wanOFPort     = 3
	ctlOFPort     = 4
	client2OFPort = 6 // the second client of a lab with two agents per site
)

// UntunedSysctls are the stock Linux TCP buffer limits the client and
// server run with. A new namespace copies them from the machine's own, so
// without pinning them a tuned machine would make the "untuned" end hosts
// tuned. The congestion control stays the machine's default: a namespace
// may only choose from the machine's allowed list. The net.core buffer
// maxima cannot be set inside a namespace at all (they mirror the
// machine's, read-only).
var UntunedSysctls = map[string]string{
	"net.ipv4.tcp_rmem": "4096 131072 6291456",
	"net.ipv4.tcp_wmem": "4096 16384 4194304",
}

// WAN is the emulated link between the sites; both directions are shaped
// alike.
type WAN struct {
	Rate       int64         `json:"rate_bps"` // bit/s of Ethernet frames; 0 is unlimited
	RTT        time.Duration `json:"rtt"`      // twice the one-way delay
	Loss       float64       `json:"loss"`     // random loss probability per frame and direction
	QueueBytes int           `json:"queue_bytes,omitempty"`
	Seed       int64         `json:"seed"`
}

// DefaultWAN is the demo's link: 500 Mbit/s, 200 ms round trip, 0.1% loss.
var DefaultWAN = WAN{Rate: 500_000_000, RTT: 200 * time.Millisecond, Loss: 0.001, Seed: 1}

// String describes the link for people.
func (w WAN) String() string {
	rate := "unlimited"
	if w.Rate > 0 {
		rate = FormatRate(float64(w.Rate))
	}
	return fmt.Sprintf("%s, %v RTT, %.2g%% loss", rate, w.RTT, w.Loss*100)
}

// FormatRate renders bit/s as Mbit/s or Gbit/s.
func FormatRate(bps float64) string {
	if bps >= 1e9 {
		return strconv.FormatFloat(bps/1e9, 'f', 2, 64) + " Gbit/s"
	}
	return strconv.FormatFloat(bps/1e6, 'f', 0, 64) + " Mbit/s"
}

// Options say what lab to bring up.
type Options struct {
	// Config is the lab's sos.hcl. Its two sites, their switches and agents
	// shape the topology; a copy of it, with paths moved into the lab's
	// directory, is what the sosappliance processes run with.
	Config string
	// Sosappliance is the binary to run as controller and agents. Empty
	// brings up the network alone, with switches that forward everything
	// normally.
	Sosappliance string
	// Wanem is the WAN emulator binary (examples/lab/cmd/wanem).
	Wanem string
	WAN   WAN
	// StateDir holds the labs' directories; empty means DefaultStateDir.
	StateDir string
	// Persistent labs outlive the process that brought them up (`lab up`)
	// and are removed by `lab down`; other labs die with their process.
	Persistent bool
	// EditConfig, if set, changes the lab's copy of the config before the
	// appliance starts (e.g. the benchmark's extra whitelists).
	EditConfig func(*ConfigFile) error
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// Controllers is 2 for a second controller and a three-member etcd
	// they elect the master on (ha.go); 0 or 1 for the one controller.
	Controllers int
	// Agents is 2 for a second agent at every site and a second client
	// at the first (agents.go); 0 or 1 for what the config declares.
	Agents int
}

// Lab is a running lab.
type Lab struct {
	ID  string
	Dir string

	opts   Options
	cfg    *config.Config
	sites  []site
	ledger *ledger
	ovs    *ovs

	mu    sync.Mutex
	procs map[string]*Process
}

// site is one side of the lab as the config describes it.
type site struct {
	letter   string // "a" or "b": names the veths in the switch namespace
	sw       *config.Switch
	host     Host
	hostAddr netip.Addr
	hostMAC  string
	// agents are the site's agents in the config's order, each in the
	// namespace of the same index of agentHosts.
	agents     []*config.Agent
	agentHosts []Host
}

// Up builds a lab. On failure or when ctx ends it removes whatever it made.
func Up(ctx context.Context, opts Options) (lab *Lab, err error) {
	if opts.StateDir == "" {
		opts.StateDir = DefaultStateDir
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Agents < 0 || opts.Agents > maxAgentsPerSite {
		return nil, fmt.Errorf("lab: %d agents per site; the lab wires 1 or %d", opts.Agents, maxAgentsPerSite)
	}
	if err := CheckPrerequisites(opts); err != nil {
		return nil, err
	}
	cfg, src, diags := config.LoadFile(opts.Config)
	if diags.HasErrors() {
		var b strings.Builder
		config.WriteDiagnostics(&b, diags, src.Bytes)
		return nil, fmt.Errorf("lab config:\n%s", b.String())
	}
	sites, err := labSites(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := Reap(opts.StateDir, opts.Progress); err != nil {
		// A lab that cannot be removed does not stop a new one: names never
		// collide. `lab down` reports it again.
		fmt.Fprintf(opts.Progress, "warning: %v\n", err)
	}
	l := &Lab{opts: opts, cfg: cfg, sites: sites, procs: map[string]*Process{}}
	if err := l.createDir(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("lab %s: %w%s", l.ID, err, l.logTails())
			if downErr := l.Down(); downErr != nil {
				err = errors.Join(err, downErr)
			}
			lab = nil
		}
	}()
	if err := l.writeConfig(); err != nil {
		return nil, err
	}
	start := time.Now()
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"namespaces and veths (MTU 9000, offloads off)", l.buildNetwork},
		{"IPv6 on the end hosts and agents (dual-stack config only)", l.enableIPv6},
		{"Open vSwitch: " + strings.Join(l.Bridges(), " and ") + ", userspace datapath, fail_mode=secure", l.startSwitches},
		{l.wanStep(), l.startWAN},
		{l.applianceStep(), l.startAppliance},
		{"path from client to server", l.checkPath},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(opts.Progress, "lab %s: %s\n", l.ID, s.what)
		if err := s.do(ctx); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(opts.Progress, "lab %s: up in %.1f s\n", l.ID, time.Since(start).Seconds())
	return l, nil
}

// CheckPrerequisites reports what the lab needs and does not find: root and
// the programs it runs.
func CheckPrerequisites(opts Options) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, b := range []string{"ip", "ethtool", "sysctl", "ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := os.Stat(ovsSchema); err != nil {
		missing = append(missing, ovsSchema)
	}
	for _, bin := range []string{opts.Wanem, opts.Sosappliance} {
		if bin == "" {
			continue
		}
		if st, err := os.Stat(bin); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, bin)
		}
	}
	if opts.Wanem == "" {
		missing = append(missing, "the wanem binary (Options.Wanem)")
	}
	if opts.Controllers > 1 {
		for _, b := range []string{"etcd", "etcdctl"} {
			if _, err := exec.LookPath(b); err != nil {
				missing = append(missing, b)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("lab prerequisites missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

// labSites maps the config onto the lab: two sites (client and server) or
// three (a third host behind its own agent), one switch and one or two
// agents each; the hosts' addresses inside them.
func labSites(cfg *config.Config) ([]site, error) {
	if len(cfg.Sites) != 2 && len(cfg.Sites) != 3 {
		return nil, fmt.Errorf("lab config: the lab has two or three sites, the config %d", len(cfg.Sites))
	}
	sites := make([]site, len(cfg.Sites))
	hosts := [3]Host{Client, Server, HostC}
	agents := [3]Host{AgentA, AgentB, AgentC}
	addrs := [3]netip.Addr{ClientAddr, ServerAddr, HostCAddr}
	for i, s := range cfg.Sites {
		if len(s.Switches) != 1 || len(s.Agents) < 1 || len(s.Agents) > maxAgentsPerSite {
			return sites, fmt.Errorf("lab config: site %q needs one switch and one or two agents", s.Name)
		}
		if cfg.SiteOf(addrs[i]) != s {
			return sites, fmt.Errorf("lab config: the lab's %s %s is not in site %q", hosts[i], addrs[i], s.Name)
		}
		for _, ag := range s.Agents {
			switch ag.SwitchPort {
			case hostOFPort, wanOFPort, ctlOFPort, client2OFPort:
				return sites, fmt.Errorf("lab config: agent %q switch_port %d is taken by the lab's wiring (host 1, WAN 3, controller 4, second client 6)", ag.Name, ag.SwitchPort)
			}
		}
		if s.Switches[0].Connect != "" {
			return sites, fmt.Errorf("lab config: switch %q: the lab's switches dial the controller; remove connect", s.Switches[0].Name)
		}
		sites[i] = site{
			letter:   string(rune('a' + i)),
			sw:       s.Switches[0],
			host:     hosts[i],
			hostAddr: addrs[i],
			hostMAC:  fmt.Sprintf("02:5a:00:00:%02x:0a", i+1),
			agents:   s.Agents,
		}
		for j := range s.Agents {
			sites[i].agentHosts = append(sites[i].agentHosts, agentHost(agents[i], j))
		}
	}
	if cfg.Controller == nil {
		return sites, errors.New("lab config: the lab needs a controller block")
	}
	host, _, err := net.SplitHostPort(cfg.Controller.Listen)
	if err != nil || (host != "127.0.0.1" && host != "0.0.0.0") {
		return sites, fmt.Errorf("lab config: controller listen %q: the controller runs beside the switches and must listen on 127.0.0.1", cfg.Controller.Listen)
	}
	return sites, nil
}

// createDir makes the lab's directory with its ledger in place before the
// name becomes visible, so no other process ever sees a lab without one.
func (l *Lab) createDir() error {
	if err := os.MkdirAll(l.opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	owner, err := selfRef("owner")
	if err != nil {
		return err
	}
	for range 16 {
		var id [2]byte
		if _, err := rand.Read(id[:]); err != nil {
			return err
		}
		l.ID = hex.EncodeToString(id[:])
		tmp, err := os.MkdirTemp(l.opts.StateDir, ".new-")
		if err != nil {
			return fmt.Errorf("lab directory: %w", err)
		}
		l.Dir = filepath.Join(l.opts.StateDir, l.ID)
		rec := Record{ID: l.ID, Dir: l.Dir, Created: time.Now(), WAN: l.opts.WAN}
		if !l.opts.Persistent {
			rec.Owner = &owner
		}
		led, err := createLedger(tmp, rec)
		if err == nil {
			for _, sub := range []string{"logs", "ovs"} {
				err = errors.Join(err, os.Mkdir(filepath.Join(tmp, sub), 0o700))
			}
		}
		if err == nil {
			err = os.Rename(tmp, l.Dir)
		}
		if err != nil {
			os.RemoveAll(tmp)
			if errors.Is(err, os.ErrExist) || errors.Is(err, errNotEmpty) {
				continue
			}
			return fmt.Errorf("lab directory: %w", err)
		}
		led.path = filepath.Join(l.Dir, ledgerFile)
		l.ledger = led
		l.ovs = newOVS(filepath.Join(l.Dir, "ovs"))
		return nil
	}
	return errors.New("lab directory: no free lab id after 16 tries")
}

// Namespace is the network namespace of a host in this lab.
func (l *Lab) Namespace(h Host) string { return namespaceName(l.ID, h) }

// NamespacePrefix starts the name of every namespace of every lab.
const NamespacePrefix = "sosl-"

func namespaceName(id string, h Host) string { return NamespacePrefix + id + "-" + string(h) }

// Command prepares a program to run inside a host's namespace. The kernel
// kills it if the calling process dies first.
func (l *Lab) Command(ctx context.Context, h Host, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.Namespace(h), name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Run runs a program inside a host's namespace and returns its output.
func (l *Lab) Run(ctx context.Context, h Host, name string, args ...string) (string, error) {
	return runIn(ctx, l.Namespace(h), name, args...)
}

// InNamespace runs fn on a thread inside a host's namespace; sockets it
// opens live there.
func (l *Lab) InNamespace(h Host, fn func() error) error { return inNetns(l.Namespace(h), fn) }

// Listen opens a listener inside a host's namespace.
func (l *Lab) Listen(h Host, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := l.InNamespace(h, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Dial opens a connection from inside a host's namespace.
func (l *Lab) Dial(ctx context.Context, h Host, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := l.InNamespace(h, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Config is the decoded lab config the lab was built from.
func (l *Lab) Config() *config.Config { return l.cfg }

// WAN is the emulated link of this lab.
func (l *Lab) WAN() WAN { return l.opts.WAN }

// Appliance reports whether the sosappliance controller and agents run.
func (l *Lab) Appliance() bool { return l.opts.Sosappliance != "" }

// Ofctl runs ovs-ofctl (OpenFlow 1.3) against the lab's switches, e.g.
// Ofctl(ctx, "dump-flows", "br-a").
func (l *Lab) Ofctl(ctx context.Context, args ...string) (string, error) {
	return l.ovs.ofctl(ctx, args...)
}

// Vsctl runs ovs-vsctl against the lab's Open vSwitch database.
func (l *Lab) Vsctl(ctx context.Context, args ...string) (string, error) {
	return l.ovs.vsctl(ctx, args...)
}

// Bridges are the names of the lab's switches, site a first.
func (l *Lab) Bridges() []string {
	var out []string
	for _, s := range l.sites {
		out = append(out, s.sw.Name)
	}
	return out
}

// buildNetwork creates the namespaces and wires them:
//
//	client ── br-a ─┬─ wan-a ═ WAN ═ wan-b ─┬─ br-b ── server
//	agent-a ──┘     └ ctl0 (switch ns)        └── agent-b
func (l *Lab) buildNetwork(ctx context.Context) error {
	for _, h := range l.hosts() {
		ns := l.Namespace(h)
		if err := l.ledger.addNamespace(ns); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
			return err
		}
		// IPv6 off before any interface exists keeps neighbour discovery
		// and router solicitations off the emulated wire.
		if _, err := runIn(ctx, ns, "sysctl", "-q", "-w",
			"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	sw := l.Namespace(SwitchHost)
	prefix := func(a netip.Addr) string { return netip.PrefixFrom(a, PrefixLen).String() }
	var links []veth
	for _, s := range l.sites {
		links = append(links,
			veth{ns: l.Namespace(s.host), name: "eth0", mac: s.hostMAC, addr: prefix(s.hostAddr),
				peerNS: sw, peer: s.letter + "-" + string(s.host)})
		for j, ag := range s.agents {
			links = append(links, veth{ns: l.Namespace(s.agentHosts[j]), name: ag.Interface, mac: ag.MAC.String(), addr: prefix(ag.Address),
				peerNS: sw, peer: agentPortName(s.letter, j)})
		}
		links = append(links, veth{ns: l.Namespace(WANHost), name: "wan-" + s.letter, peerNS: sw, peer: s.letter + "-wan"})
	}
	if l.secondClient() {
		links = append(links, veth{ns: l.Namespace(Client2), name: "eth0", mac: client2MAC, addr: prefix(Client2Addr),
			peerNS: sw, peer: "a-" + string(Client2)})
	}
	links = append(links, veth{ns: sw, name: "ctl0", mac: "02:5a:00:00:01:01", addr: prefix(ControllerAddr), peerNS: sw, peer: "a-ctl"})
	for _, v := range links {
		if err := v.create(ctx); err != nil {
			return err
		}
	}
	for _, h := range l.endHosts() {
		args := []string{"-q", "-w"}
		for _, k := range sortedKeys(UntunedSysctls) {
			args = append(args, k+"="+UntunedSysctls[k])
		}
		if _, err := runIn(ctx, l.Namespace(h), "sysctl", args...); err != nil {
			return err
		}
	}
	return nil
}

// veth is a pair between two namespaces; the first end may carry an address.
type veth struct {
	ns, name, mac, addr string
	peerNS, peer        string
}

func (v veth) create(ctx context.Context) error {
	mtu := strconv.Itoa(MTU)
	steps := [][]string{
		{"ip", "link", "add", v.name, "netns", v.ns, "mtu", mtu, "type", "veth", "peer", "name", v.peer, "netns", v.peerNS, "mtu", mtu},
	}
	if v.mac != "" {
		steps = append(steps, []string{"ip", "-n", v.ns, "link", "set", v.name, "address", v.mac})
	}
	if v.addr != "" {
		steps = append(steps, []string{"ip", "-n", v.ns, "addr", "add", v.addr, "dev", v.name})
	}
	for _, end := range [][2]string{{v.ns, v.name}, {v.peerNS, v.peer}} {
		// The userspace datapath and the emulator forward frames as they
		// are: a checksum left for the NIC would arrive unfinished, and a
		// segmentation offload would hand them frames above the MTU.
		steps = append(steps,
			[]string{"ip", "netns", "exec", end[0], "ethtool", "-K", end[1], "tx", "off", "tso", "off", "gso", "off", "gro", "off"},
			[]string{"ip", "-n", end[0], "link", "set", end[1], "up"})
	}
	for _, s := range steps {
		if _, err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("veth %s/%s: %w", v.ns, v.name, err)
		}
	}
	return nil
}

// startSwitches runs the private Open vSwitch in the switch namespace and
// creates the two site bridges with their ports.
func (l *Lab) startSwitches(ctx context.Context) error {
	if err := l.ovs.createDB(ctx); err != nil {
		return err
	}
	if _, err := l.start("ovsdb-server", SwitchHost, l.ovs.env, "ovsdb-server", l.ovs.serverArgs()...); err != nil {
		return err
	}
	if err := l.ovs.waitDB(ctx); err != nil {
		return err
	}
	if _, err := l.ovs.vsctl(ctx, "--no-wait", "init"); err != nil {
		return err
	}
	if _, err := l.start("ovs-vswitchd", SwitchHost, l.ovs.switchEnv(), "ovs-vswitchd", l.ovs.switchArgs()...); err != nil {
		return err
	}
	// A vsctl that waits for ovs-vswitchd to apply a change proves it runs.
	if _, err := l.ovs.vsctl(ctx, "set", "Open_vSwitch", ".", "external_ids:sosappliance-lab="+l.ID); err != nil {
		return fmt.Errorf("ovs-vswitchd did not come up: %w", err)
	}
	var targets []string
	for _, c := range l.cfg.Controllers {
		_, port, _ := net.SplitHostPort(c.Listen)
		targets = append(targets, "tcp:127.0.0.1:"+port)
	}
	for _, s := range l.sites {
		b := bridge{name: s.sw.Name, datapathID: s.sw.DatapathID, ports: []bridgePort{
			{name: s.letter + "-" + string(s.host), ofport: hostOFPort},
			{name: s.letter + "-wan", ofport: wanOFPort},
		}}
		for j, ag := range s.agents {
			b.ports = append(b.ports, bridgePort{name: agentPortName(s.letter, j), ofport: ag.SwitchPort})
		}
		if s.letter == "a" {
			b.ports = append(b.ports, bridgePort{name: "a-ctl", ofport: ctlOFPort})
			if l.secondClient() {
				b.ports = append(b.ports, bridgePort{name: "a-" + string(Client2), ofport: client2OFPort})
			}
		}
		if l.Appliance() {
			b.controllers = targets
		}
		// The switch's port sockets get buffers a switch port would
		// have (see switchPortBuffer).
		if err := withSocketBufferDefaults(switchPortBuffer, func() error { return l.ovs.addBridge(ctx, b) }); err != nil {
			return err
		}
		if !l.Appliance() {
			// Without the controller a secure bridge drops everything; a
			// plain lab is a pair of ordinary learning switches.
			if _, err := l.ovs.ofctl(ctx, "add-flow", s.sw.Name, "priority=0,actions=NORMAL"); err != nil {
				return err
			}
		}
	}
	return nil
}

// startWAN runs the emulator between the two WAN veths.
func (l *Lab) startWAN(ctx context.Context) error {
	w := l.opts.WAN
	args := []string{"--a", "wan-a", "--b", "wan-b",
		"--delay", (w.RTT / 2).String(),
		"--rate", strconv.FormatInt(w.Rate, 10) + "bit",
		"--loss", strconv.FormatFloat(w.Loss, 'g', -1, 64),
		"--seed", strconv.FormatInt(w.Seed, 10)}
	if w.QueueBytes > 0 {
		args = append(args, "--queue", strconv.Itoa(w.QueueBytes))
	}
	if len(l.sites) == 3 {
		return l.startHubWAN(ctx)
	}
	p, err := l.start("wanem", WANHost, nil, l.opts.Wanem, args...)
	if err != nil {
		return err
	}
	// The emulator logs its settings once its sockets are open.
	return poll(ctx, 10*time.Second, "WAN emulator", func() (bool, error) {
		if !p.Ref.Alive() {
			return false, errors.New("wanem exited")
		}
		log, _ := os.ReadFile(p.Ref.Log)
		return wanem.Joined(string(log)), nil
	})
}

// checkPath waits until a TCP connection from the client reaches the server
// on a port no whitelist names: the switches forward and the WAN carries.
func (l *Lab) checkPath(ctx context.Context) error {
	const port = 9
	ln, err := l.Listen(Server, "tcp", netip.AddrPortFrom(ServerAddr, port).String())
	if err != nil {
		return fmt.Errorf("listen on the server: %w", err)
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
	target := netip.AddrPortFrom(ServerAddr, port).String()
	return poll(ctx, 30*time.Second, "client to server", func() (bool, error) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := l.Dial(dctx, Client, "tcp", target)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	})
}

// Down stops every process of the lab, deletes its namespaces and removes
// its directory. It is safe to call more than once.
func (l *Lab) Down() error {
	if l == nil || l.ledger == nil {
		return nil
	}
	err := Teardown(l.ledger.snapshot())
	l.mu.Lock()
	procs := l.procs
	l.procs = map[string]*Process{}
	l.mu.Unlock()
	for _, p := range procs {
		p.reap()
	}
	return err
}

// Teardown removes a lab from its record: processes in reverse start order,
// then namespaces (killing anything left inside), then the directory. It is
// what Down, `lab down` and Reap share.
func Teardown(rec Record) error {
	var errs []error
	for i := len(rec.Processes) - 1; i >= 0; i-- {
		if err := stopProcess(rec.Processes[i], 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	namespaces := append([]string(nil), rec.Namespaces...)
	if rec.ID != "" {
		// Namespaces created after the last ledger write of a lab that
		// crashed still carry the lab's prefix.
		all, err := listNetns()
		errs = append(errs, err)
		for _, ns := range all {
			if strings.HasPrefix(ns, NamespacePrefix+rec.ID+"-") {
				namespaces = append(namespaces, ns)
			}
		}
	}
	for i := len(namespaces) - 1; i >= 0; i-- {
		if err := deleteNetns(namespaces[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tear down lab %s: %w", rec.ID, err)
	}
	if rec.Dir != "" {
		if err := os.RemoveAll(rec.Dir); err != nil {
			return fmt.Errorf("tear down lab %s: %w", rec.ID, err)
		}
	}
	return nil
}

// Reap tears down the labs whose owner died without doing it (a crash, a
// SIGKILL, a test binary killed at its timeout) and returns their ids.
func Reap(stateDir string, progress io.Writer) ([]string, error) {
	recs, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	var reaped []string
	var errs []error
	// A crash while creating a lab leaves its unnamed directory behind; it
	// holds no more than a ledger with nothing in it yet.
	if tmps, err := filepath.Glob(filepath.Join(stateDir, ".new-*")); err == nil {
		for _, tmp := range tmps {
			if st, err := os.Stat(tmp); err == nil && time.Since(st.ModTime()) > time.Minute {
				errs = append(errs, os.RemoveAll(tmp))
			}
		}
	}
	for _, rec := range recs {
		// A directory without a readable ledger cannot belong to a live lab:
		// the ledger is in place before the directory gets its name.
		broken := rec.Created.IsZero()
		if !broken && !rec.Orphaned() {
			continue
		}
		if progress != nil {
			fmt.Fprintf(progress, "lab %s: left behind by a process that is gone; removing it\n", rec.ID)
		}
		if err := Teardown(rec); err != nil {
			errs = append(errs, err)
			continue
		}
		reaped = append(reaped, rec.ID)
	}
	return reaped, errors.Join(errs...)
}

// logTails renders the end of each process log, for error reports.
func (l *Lab) logTails() string {
	var b strings.Builder
	for _, p := range l.ledger.snapshot().Processes {
		data, err := os.ReadFile(p.Log)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s (%s) ---\n%s", p.Name, p.Log, tailLines(string(data), 15))
	}
	return b.String()
}

// LogDir is where the lab's processes log, one NAME.log each; it goes
// with the lab's directory.
func (l *Lab) LogDir() string { return filepath.Join(l.Dir, "logs") }

// LogTail returns the last lines of a lab process's log.
func (l *Lab) LogTail(name string, lines int) string {
	data, err := os.ReadFile(filepath.Join(l.LogDir(), name+".log"))
	if err != nil {
		return ""
	}
	return tailLines(string(data), lines)
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// StrayNamespaces returns lab namespaces that belong to no lab: no lab
// directory under stateDir (or the default one) has their id, nothing runs
// inside them, and they are older than a minute. A namespace with
// processes in it, or a young one, may belong to a lab kept under another
// state directory or still being built, so it is never called a stray.
func StrayNamespaces(stateDir string) ([]string, error) {
	all, err := listNetns()
	if err != nil {
		return nil, err
	}
	var strays []string
	for _, ns := range all {
		rest, ok := strings.CutPrefix(ns, NamespacePrefix)
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, "-")
		owned := false
		for _, dir := range []string{stateDir, DefaultStateDir} {
			if _, err := os.Stat(filepath.Join(dir, id)); !os.IsNotExist(err) {
				owned = true
			}
		}
		if owned {
			continue
		}
		if st, err := os.Stat(filepath.Join("/var/run/netns", ns)); err != nil || time.Since(st.ModTime()) < time.Minute {
			continue
		}
		if pids, err := netnsPids(ns); err != nil || len(pids) > 0 {
			continue
		}
		strays = append(strays, ns)
	}
	return strays, nil
}

// DeleteNamespace kills what runs in a namespace and deletes it.
func DeleteNamespace(ns string) error { return deleteNetns(ns) }
