// Package desired computes, without any I/O, what one node must look like
// under a configuration: which host items it owns, the ready spec of every
// relay it runs, and, on the controller node, the controller's spec with the
// flows each switch must carry. The shell only joins what needs I/O: the
// PSK and TLS files named in the specs.
package desired

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// Desired is the state one node converges to.
type Desired struct {
	Node string
	// Roles names what the node does, for logs and status: "controller",
	// "agent:NAME", "tuning".
	Roles      []string
	Controller *Controller // nil unless the node runs the controller
	// Cluster is nil without a cluster block (see cluster.go).
	Cluster *Cluster
	Agents  []*Agent // agents the node runs, by name
	// Items are the host items the node owns, sorted by kind and key:
	// sysctl, interface, irq, relay and steering. Each says where its
	// value came from (Origin).
	Items []item.Item
	// Notes are the advice of the built-in profiles the node's tuning
	// blocks are based on that is no single value, each once, prefixed
	// with the profile's name.
	Notes []string
}

// Controller is the OpenFlow controller role: the complete spec of the
// controller, less the TLS files' contents.
type Controller struct {
	Listen string
	// TLS names the files of OpenFlow over TLS; nil for plain TCP only.
	// The shell reads them.
	TLS            *TLSFiles
	Keepalive      time.Duration
	HealthInterval time.Duration
	// HealthTimeout bounds one agent probe and HealthFall is how many
	// failed probes in a row mark an agent down.
	HealthTimeout time.Duration
	HealthFall    int
	// ResyncInterval is how often switch flows are re-read for drift: the
	// daemon's drift interval.
	ResyncInterval    time.Duration
	RemoveFlowsOnStop bool
	// Switches are the switches with their flows; a switch the controller
	// dials has Connect set.
	Switches []flows.Switch
	// Health maps every agent name to where its health is probed.
	Health map[string]HealthTarget
}

// healthTimeout bounds one agent probe. Probes to the far site cross the
// WAN, where a full drop-tail queue or a lost SYN (retried after 1 s, then
// 3 s) can delay an answer well past a short check interval; withdrawing
// steering over that would break every accelerated connection in flight.
const healthTimeout = 5 * time.Second

// healthFall is how many failed probes in a row mark an agent down.
const healthFall = 3

// TLSFiles are the controller's certificate and key and the CA of the
// switches' certificates, as paths.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// HealthTarget is where the controller checks an agent: the HTTP health
// endpoint, with the stripe data port as the fallback.
type HealthTarget struct {
	HTTP string
	Data netip.AddrPort
	// MaxSessions is the agent's max_sessions: it never reports more
	// live sessions than that.
	MaxSessions int
}

// Agent is one relay the node runs.
type Agent struct {
	Name      string
	Interface string // where steered connections arrive
	Address   netip.Addr
	// SteeringMark, SteeringTable and SteeringPriority are the steering's
	// numbers as the file sets them; 0 is the default.
	SteeringMark, SteeringTable, SteeringPriority uint32
	// Relay is the relay's ready spec: listeners, identity, encryption,
	// limits, routes (client routes carry the far agent's stripe address
	// and name, server routes the client-side agent allowed), socket
	// tuning and CPU pinning. Only the PSK is missing: the shell reads
	// Relay.PSKFile and joins it.
	Relay agentspec.Relay
}

// UnknownNodeError says that a node has no role at all in the file, which is
// almost always a typo in --node or a host renamed.
type UnknownNodeError struct {
	Node  string
	Known []string
}

func (e *UnknownNodeError) Error() string {
	if near := config.Closest(e.Node, e.Known); near != "" {
		return fmt.Sprintf("node %q has no role in the configuration; did you mean --node %s? (known nodes: %s)", e.Node, near, strings.Join(e.Known, ", "))
	}
	return fmt.Sprintf("node %q has no role in the configuration (known nodes: %s); pass --node", e.Node, strings.Join(e.Known, ", "))
}

// Compile computes the desired state of node under cfg.
func Compile(cfg *config.Config, node string) (*Desired, error) {
	d := &Desired{Node: node}
	var profiles []profileUse

	if c := cfg.ControllerFor(node); c != nil {
		d.Roles = append(d.Roles, "controller")
		d.Controller = compileController(cfg, c)
	}
	d.Cluster = compileCluster(cfg)
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			if a.Node != node {
				continue
			}
			d.Roles = append(d.Roles, "agent:"+a.Name)
			ag, err := compileAgent(cfg, a)
			if err != nil {
				return nil, err
			}
			d.Agents = append(d.Agents, ag)
			for _, t := range a.Tuning {
				profiles = append(profiles, profileUse{cfg.Tuning(t), "agent " + a.Name})
			}
		}
	}
	for _, n := range cfg.Nodes {
		if n.Name != node {
			continue
		}
		d.Roles = append(d.Roles, "tuning")
		for _, t := range n.Tuning {
			profiles = append(profiles, profileUse{cfg.Tuning(t), "node " + n.Name})
		}
	}
	if len(d.Roles) == 0 {
		return nil, &UnknownNodeError{Node: node, Known: Nodes(cfg)}
	}

	items, relayCPUs, err := compileTuning(profiles)
	if err != nil {
		return nil, err
	}
	d.Notes = profileNotes(profiles)
	for _, a := range d.Agents {
		// The relays share the daemon's process, so one CPU list pins
		// them all.
		a.Relay.RelayCPUs = slices.Clone(relayCPUs)
		for _, p := range profiles {
			if p.t.CongestionControl != "" && a.Relay.Congestion == "" {
				a.Relay.Congestion = p.t.CongestionControl
			}
			if p.t.SocketBuffer > 0 && a.Relay.SocketBuffer == 0 {
				a.Relay.SocketBuffer = int(p.t.SocketBuffer)
			}
		}
		steer, err := steeringItems(a)
		if err != nil {
			return nil, err
		}
		for i := range steer {
			// The steering check's refusals name it, with its line.
			steer[i].Origin = "agent " + a.Name
			if ca := cfg.Agent(a.Name); ca != nil && ca.Range.Filename != "" {
				steer[i].Origin = fmt.Sprintf("agent %s (%s:%d)", a.Name, ca.Range.Filename, ca.Range.Start.Line)
			}
			// A tuning may not set what steering needs otherwise (the
			// interface's rp_filter); one that sets the same value
			// already desires the item, which is desired once (twice,
			// the plan file holding it could not be read back).
			if j := slices.IndexFunc(items, func(it item.Item) bool { return it.Kind == steer[i].Kind && it.Key == steer[i].Key }); j >= 0 {
				if got, _ := item.Canonical(items[j]); got.Value != steer[i].Value {
					return nil, fmt.Errorf("%s %s is %q in a tuning%s, but agent %s's steering needs %q on its interface %s (loose reverse-path checks: steered packets carry addresses that are not the host's); take it out of the tuning",
						items[j].Kind, items[j].Key, items[j].Value, sysctlAt(profiles, items[j].Key), a.Name, steer[i].Value, a.Interface)
				}
				continue
			}
			items = append(items, steer[i])
		}
	}
	sortItems(items)
	d.Items = items
	return d, nil
}

// sysctlAt says where the first of profiles that sets sysctl key sets
// it: " at file:line:col", or "" when none says.
func sysctlAt(profiles []profileUse, key string) string {
	for _, p := range profiles {
		if o, ok := p.t.SysctlOrigins[key]; ok && o.Range.Filename != "" {
			return fmt.Sprintf(" at %s:%d:%d", o.Range.Filename, o.Range.Start.Line, o.Range.Start.Column)
		}
	}
	return ""
}

// Nodes lists every node the configuration gives a role, sorted.
func Nodes(cfg *config.Config) []string {
	seen := map[string]bool{}
	for _, c := range cfg.Controllers {
		seen[c.Node] = true
	}
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			seen[a.Node] = true
		}
	}
	for _, n := range cfg.Nodes {
		seen[n.Name] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func compileController(cfg *config.Config, c *config.Controller) *Controller {
	ctl := &Controller{
		Listen:            c.Listen,
		Keepalive:         c.Keepalive,
		HealthInterval:    c.HealthInterval,
		HealthTimeout:     max(c.HealthInterval, healthTimeout),
		HealthFall:        healthFall,
		ResyncInterval:    cfg.Daemon.DriftInterval,
		RemoveFlowsOnStop: c.RemoveFlowsOnStop,
		Health:            map[string]HealthTarget{},
	}
	if t := c.TLS; t != nil {
		ctl.TLS = &TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}
	}
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			ctl.Health[a.Name] = HealthTarget{HTTP: a.HealthListen, Data: a.DataAddr(), MaxSessions: cfg.Limits.MaxSessions}
		}
		for _, sw := range s.Switches {
			ctl.Switches = append(ctl.Switches, compileSwitch(cfg, sw))
		}
	}
	sort.Slice(ctl.Switches, func(i, j int) bool { return ctl.Switches[i].Name < ctl.Switches[j].Name })
	return ctl
}

func flowAgent(a *config.Agent) flows.Agent {
	return flows.Agent{Name: a.Name, MAC: a.MAC, Port: a.SwitchPort}
}

func compileSwitch(cfg *config.Config, sw *config.Switch) flows.Switch {
	out := flows.Switch{Name: sw.Name, DatapathID: sw.DatapathID, Forwarding: sw.Forwarding,
		Connect: sw.Connect, TLS: sw.TLS, Allow: slices.Clone(sw.Allow), TLSName: sw.TLSName, NoPortMasks: !sw.PortMasks}
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			if a.Switch == sw.Name {
				out.Agents = append(out.Agents, flowAgent(a))
			}
		}
	}
	var agentAddrs []netip.Addr
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			agentAddrs = append(agentAddrs, a.Address)
		}
	}
	for _, w := range cfg.Whitelists {
		deps := []string{w.ClientAgent, w.ServerAgent}
		sort.Strings(deps)
		spreadOut := len(w.ClientAgents) > 1 || len(w.ServerAgents) > 1
		for _, e := range directions(w) {
			var unsteered []netip.Addr
			for _, addr := range agentAddrs {
				if slices.ContainsFunc(e.clients, func(p netip.Prefix) bool { return p.Contains(addr) }) {
					unsteered = append(unsteered, addr)
				}
			}
			for _, side := range []struct {
				side   flows.Side
				agent  string
				agents []string
			}{{flows.ClientSide, e.clientAgent, e.clientAgents}, {flows.ServerSide, e.serverAgent, e.serverAgents}} {
				a := cfg.Agent(side.agent)
				if a == nil || a.Switch != sw.Name {
					continue
				}
				st := flows.Steer{
					Whitelist: w.Name,
					Side:      side.side,
					Clients:   slices.Clone(e.clients),
					Servers:   slices.Clone(e.servers),
					Ports:     slices.Clone(w.Ports),
					Reverse:   e.reverse,
					Agent:     flowAgent(a),
					DependsOn: deps,
				}
				if spreadOut {
					// Several agents: the whitelist fails open only when
					// every agent of one of its sites is down, and a side
					// with several spreads its connections over them.
					st.DependsOn = nil
					st.DependsOnSites = [][]string{slices.Clone(w.ClientAgents), slices.Clone(w.ServerAgents)}
					if len(side.agents) > 1 {
						for _, name := range side.agents {
							st.Agents = append(st.Agents, flowAgent(cfg.Agent(name)))
						}
						st.Spread, st.SpreadBits = spread.Mode(cfg.Spread.Mode), cfg.SpreadBits()
					}
				}
				if side.side == flows.ServerSide {
					st.Unsteered = unsteered
				}
				out.Steers = append(out.Steers, st)
			}
		}
	}
	sort.Slice(out.Agents, func(i, j int) bool { return out.Agents[i].Port < out.Agents[j].Port })
	sort.SliceStable(out.Steers, func(i, j int) bool {
		a, b := out.Steers[i], out.Steers[j]
		if a.Whitelist != b.Whitelist {
			return a.Whitelist < b.Whitelist
		}
		if a.Reverse != b.Reverse {
			return !a.Reverse
		}
		return a.Side < b.Side
	})
	return out
}

func compileAgent(cfg *config.Config, a *config.Agent) (*Agent, error) {
	l := cfg.Limits
	ag := &Agent{
		Name:             a.Name,
		Interface:        a.Interface,
		Address:          a.Address,
		SteeringMark:     a.SteeringMark,
		SteeringTable:    a.SteeringTable,
		SteeringPriority: a.SteeringPriority,
		Relay: agentspec.Relay{
			Name:              a.Name,
			TransparentListen: netip.AddrPortFrom(netip.IPv4Unspecified(), a.RelayPort),
			DataListen:        a.DataAddr(),
			PSKFile:           cfg.Security.PSKFile,
			Encryption:        cfg.Security.Encryption,
			Limits: agentspec.Limits{
				MaxSessions:          l.MaxSessions,
				MaxSessionsPerPeer:   cmp.Or(l.SessionsPerPeer, l.MaxSessions),
				MaxStreams:           l.MaxStreams,
				SessionMemory:        l.SessionMemory,
				Memory:               l.Memory,
				MaxPreAuth:           l.PreauthConnections,
				MaxPreAuthPerSource:  l.PreauthPerSource,
				MaxHalfOpenPerSource: l.HalfOpenPerSource,
				PreAuthTimeout:       l.PreauthTimeout,
				StallTimeout:         l.StallTimeout,
				HalfClosedIdle:       l.IdleTimeout,
				ReconnectTimeout:     l.ReconnectTimeout,
				MaxPooledPerPeer:     pooledPerPeer(l.PooledPerPeer),
			},
		},
	}
	if a.HealthListen != "" {
		hp, err := netip.ParseAddrPort(a.HealthListen)
		if err != nil {
			return nil, fmt.Errorf("agent %s health_listen: %w", a.Name, err)
		}
		ag.Relay.HealthListen = hp
	}
	ag.Relay.HealthAllow = slices.Clone(a.HealthAllow)
	ag.Relay.HealthAllowUsers = slices.Clone(a.HealthAllowUsers)
	if a.PublicKey != nil {
		// Per-agent keys (every agent has one, config checked): the
		// shell reads the private key from the file.
		ag.Relay.AgentKeyFile, ag.Relay.PublicKey = a.KeyFile, slices.Clone(a.PublicKey)
		ag.Relay.PeerKeys = map[string][]byte{}
		for _, s := range cfg.Sites {
			for _, other := range s.Agents {
				if other.Name != a.Name {
					ag.Relay.PeerKeys[other.Name] = slices.Clone(other.PublicKey)
				}
			}
		}
	}
	for _, w := range cfg.Whitelists {
		for _, e := range directions(w) {
			r := agentspec.Route{
				Name:        w.Name,
				Clients:     slices.Clone(e.clients),
				Servers:     slices.Clone(e.servers),
				Ports:       slices.Clone(w.Ports),
				Streams:     w.Streams,
				AutoStreams: w.AutoStreams,
				ChunkSize:   w.ChunkSize,
				QueueLength: w.QueueLength,
			}
			if slices.Contains(e.clientAgents, a.Name) {
				peer := cfg.Agent(e.serverAgent)
				r.Peer, r.PeerName = peer.DataAddr(), peer.Name
				if len(e.serverAgents) > 1 {
					// The far agent of a connection is the server-site
					// agent of its bucket, the one the server site's
					// switch steers the server's replies to.
					for _, name := range e.serverAgents {
						p := cfg.Agent(name)
						r.Peers = append(r.Peers, agentspec.Peer{Name: p.Name, Addr: p.DataAddr(), Pool: cfg.PoolToward(p.Name)})
					}
					r.Spread, r.SpreadBits = cfg.Spread.Mode, cfg.SpreadBits()
				}
				r.Pool = cfg.PoolToward(peer.Name)
				ag.Relay.Client = append(ag.Relay.Client, r)
			}
			if slices.Contains(e.serverAgents, a.Name) {
				r.Peer, r.PeerName = a.DataAddr(), e.clientAgent
				if len(e.clientAgents) > 1 {
					r.PeerNames = slices.Clone(e.clientAgents)
				}
				ag.Relay.Server = append(ag.Relay.Server, r)
			}
		}
	}
	// IPv6 connections reach the transparent listener too: [::] takes
	// both families.
	for _, r := range ag.Relay.Client {
		if len(r.Clients) > 0 && r.Clients[0].Addr().Is6() {
			ag.Relay.TransparentListen = netip.AddrPortFrom(netip.IPv6Unspecified(), a.RelayPort)
		}
	}
	return ag, nil
}

// direction is one direction of a whitelist: connections that hosts in
// clients open to hosts in servers, first reaching clientAgent, carried to
// serverAgent.
type direction struct {
	clients, servers           []netip.Prefix
	clientAgent, serverAgent   string
	clientAgents, serverAgents []string
	reverse                    bool
}

// directions are the whitelist as clients open its connections and, with
// direction = "both", as its servers open them toward its clients: the
// roles of the agents swap with who opens the connection, and the port is
// always the listening side's.
func directions(w *config.Whitelist) []direction {
	out := []direction{{w.Clients, w.Servers, w.ClientAgent, w.ServerAgent, w.ClientAgents, w.ServerAgents, false}}
	if w.Both() {
		out = append(out, direction{w.Servers, w.Clients, w.ServerAgent, w.ClientAgent, w.ServerAgents, w.ClientAgents, true})
	}
	return out
}

type profileUse struct {
	t   *config.Tuning
	who string
}

// compileTuning merges the profiles a node uses into host items and the
// relay CPU list; two profiles that set one item or the CPU list to
// different values are an error, since either choice would surprise
// someone. Every item carries its origin: the file line or the built-in
// profile its value came from. The CPU list is no host item: it travels in
// the relay specs.
func compileTuning(profiles []profileUse) ([]item.Item, []int, error) {
	type origin struct {
		value, who string
		from       config.Origin
	}
	set := map[string]origin{}
	var items []item.Item
	// at names where a value was set, file:line:col (a profile's: the
	// base argument that brought it in).
	at := func(o origin) string {
		r := o.from.Range
		if r.Filename == "" {
			return ""
		}
		pos := fmt.Sprintf(" at %s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
		if o.from.Profile != "" {
			pos = " from profile " + o.from.Profile + pos
		}
		return pos
	}
	put := func(kind, key, value, who string, from config.Origin) error {
		id := kind + "/" + key
		if prev, ok := set[id]; ok {
			if prev.value != value {
				now := origin{value, who, from}
				return fmt.Errorf("%s %s is %q in tuning %s%s but %q in tuning %s%s; one node takes one value: set it in one tuning, or the same in both",
					kind, key, prev.value, prev.who, at(prev), value, who, at(now))
			}
			return nil
		}
		set[id] = origin{value, who, from}
		if kind != item.KindRelay {
			items = append(items, item.Item{Kind: kind, Key: key, Value: value, Origin: from.String(), Optional: from.Optional})
		}
		return nil
	}
	var relayCPUs []int
	for _, p := range profiles {
		who := fmt.Sprintf("%q (%s)", p.t.Name, p.who)
		for _, k := range sortedKeys(p.t.Sysctl) {
			if err := put(item.KindSysctl, k, p.t.Sysctl[k], who, p.t.SysctlOrigins[k]); err != nil {
				return nil, nil, err
			}
		}
		for _, it := range p.t.Interfaces {
			if it.MTU > 0 {
				if err := put(item.KindInterface, it.Name+"/mtu", strconv.Itoa(it.MTU), who, it.MTUOrigin); err != nil {
					return nil, nil, err
				}
			}
			if it.TxQueueLen >= 0 {
				if err := put(item.KindInterface, it.Name+"/txqueuelen", strconv.Itoa(it.TxQueueLen), who, it.TxQueueLenOrigin); err != nil {
					return nil, nil, err
				}
			}
			if len(it.IRQCPUs) > 0 {
				if err := put(item.KindIRQ, it.Name, config.FormatCPUList(it.IRQCPUs), who, it.IRQOrigin); err != nil {
					return nil, nil, err
				}
			}
		}
		if len(p.t.RelayCPUs) > 0 {
			if err := put(item.KindRelay, "cpus", config.FormatCPUList(p.t.RelayCPUs), who, config.Origin{Range: p.t.RelayCPUsRange}); err != nil {
				return nil, nil, err
			}
			if relayCPUs == nil {
				relayCPUs = slices.Clone(p.t.RelayCPUs)
			}
		}
	}
	return items, relayCPUs, nil
}

// profileNotes lists the notes of the built-in profiles in use, each
// profile once.
func profileNotes(profiles []profileUse) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range profiles {
		if p.t.Base == "" || seen[p.t.Base] {
			continue
		}
		seen[p.t.Base] = true
		for _, n := range p.t.Notes {
			out = append(out, p.t.Base+": "+n)
		}
	}
	return out
}

func sortItems(items []item.Item) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Kind != items[j].Kind {
			return items[i].Kind < items[j].Kind
		}
		return items[i].Key < items[j].Key
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// pooledPerPeer is the relay's bound on a peer's idle pooled streams:
// limits.pooled_per_peer = 0 turns them off.
func pooledPerPeer(n int) int {
	if n == 0 {
		return agentspec.NoPooledStreams
	}
	return n
}
