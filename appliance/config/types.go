// Package config decodes and validates sos.hcl, the one file that describes a
// whole sosappliance deployment. Every mistake it finds is an HCL diagnostic
// that points at the file, line and column to fix; all of them are reported
// in one pass.
package config

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// Config is a decoded and validated sos.hcl. Slices keep the order of the
// file; names are unique within their kind.
type Config struct {
	Filename string
	// Controller is the first controller block, nil without one;
	// Controllers are all of them (several need a cluster block, see
	// cluster.go).
	Controller  *Controller
	Controllers []*Controller
	// Cluster is nil without a cluster block: one controller, no etcd.
	Cluster    *Cluster
	Security   Security
	Daemon     Daemon
	Limits     Limits
	Spread     Spread
	Sites      []*Site
	Whitelists []*Whitelist
	Tunings    []*Tuning
	Nodes      []*Node
	Pools      []*Pool
}

// Controller says which node runs the OpenFlow controller and how switches
// reach it.
type Controller struct {
	Node              string
	Listen            string
	Keepalive         time.Duration
	HealthInterval    time.Duration
	RemoveFlowsOnStop bool
	// TLS is nil unless the block has a tls {} block.
	TLS   *ControllerTLS
	Range hcl.Range
}

// ControllerTLS is OpenFlow over TLS on the listener: the controller's
// certificate and key, and the CA whose certificates switches must
// present. The files are read when the controller starts.
type ControllerTLS struct {
	CertFile string
	KeyFile  string
	CAFile   string
	Range    hcl.Range
}

// Security holds the pre-shared key location and the stripe encryption.
type Security struct {
	PSKFile    string
	Encryption string // EncryptionAESGCM or EncryptionNone
	Range      hcl.Range
}

// Stripe encryption modes.
const (
	EncryptionAESGCM = "aes-256-gcm"
	EncryptionNone   = "none"
)

// Daemon holds the settings of `sosappliance run` itself.
type Daemon struct {
	StatePath     string
	ControlSocket string
	MetricsListen string
	// MetricsAllow lists the source prefixes the metrics port accepts;
	// empty accepts any. A reload changes it in place.
	MetricsAllow []netip.Prefix
	// MetricsAllowUsers are the local users (names or uids) whose
	// connections from this node MetricsAllow admits besides root's.
	MetricsAllowUsers []string
	DriftInterval     time.Duration
	ShutdownTimeout   time.Duration
	LogFormat         string // "text" or "json"
}

// Limits bound what one agent will accept.
type Limits struct {
	MaxSessions int
	// SessionsPerPeer bounds the server-side sessions of one client-side
	// agent; 0: MaxSessions.
	SessionsPerPeer    int
	MaxStreams         int // per session
	SessionMemory      int64
	PreauthConnections int
	PreauthTimeout     time.Duration
	StallTimeout       time.Duration
	IdleTimeout        time.Duration
	// ReconnectTimeout aborts a session that has had no stream to its
	// peer agent for this long (lost streams are replaced meanwhile).
	ReconnectTimeout time.Duration
	// Memory caps the buffers of all sessions of an agent together; 0
	// means a quarter of the node's RAM, decided by the agent.
	Memory            int64
	PreauthPerSource  int
	HalfOpenPerSource int
	// PooledPerPeer bounds the idle pooled streams a server-side agent
	// holds for each client-side agent; 0 turns pooled streams off (they
	// are refused, and the pools toward the agent pause).
	PooledPerPeer      int
	PooledPerPeerRange hcl.Range
	Range              hcl.Range
	SessionMemoryRange hcl.Range
	MaxStreamsRange    hcl.Range
}

// Spread says how the connections of a whitelist are dealt to the agents
// of a site that has several (package sdn/spread): by bits of the client's
// TCP port or by the low bits of its address, into 2^Bits buckets.
type Spread struct {
	Mode string // "port" (the default) or "address"
	// Bits is the file's bits, or 0 for spread.DefaultBits of the
	// largest agent count of a site; BitsFor resolves it.
	Bits      int
	Range     hcl.Range
	ModeRange hcl.Range
}

// SpreadBits is the bucket bits every site uses: the file's, or enough for
// the site with the most agents.
func (c *Config) SpreadBits() int {
	if c.Spread.Bits > 0 {
		return c.Spread.Bits
	}
	n := 1
	for _, s := range c.Sites {
		n = max(n, len(s.Agents))
	}
	return spread.DefaultBits(n)
}

// Site is one location with its address space, switches and agents.
type Site struct {
	Name          string
	Prefixes      []netip.Prefix
	Switches      []*Switch
	Agents        []*Agent
	Range         hcl.Range
	PrefixesRange hcl.Range
	// incomplete is set when the prefixes could not be decoded, so that
	// whitelist checks do not pile "in no site" errors on that one mistake.
	incomplete bool
}

// Switch is an OpenFlow switch at a site.
type Switch struct {
	Name       string
	Site       string
	DatapathID uint64
	Forwarding string
	// Connect is empty when the switch dials the controller, or "tcp:IP:PORT"
	// when the controller dials a switch that listens with ptcp:.
	Connect string
	// TLS requires the switch to connect over TLS with a certificate from
	// controller.tls.ca_file; it defaults to whether the controller has a
	// tls block (for switches without connect).
	TLS bool
	// Allow lists the source prefixes the switch may connect from; empty
	// allows any.
	Allow []netip.Prefix
	// TLSName, when set, is the name the switch's certificate must carry
	// (common name, ovs-pki's "NAME id:UUID", or DNS name); it needs TLS.
	TLSName string
	// PortMasks says the switch matches TCP ports under a mask, as Open
	// vSwitch does (the default); without it a port range takes one flow
	// per port.
	PortMasks    bool
	Range        hcl.Range
	TLSRange     hcl.Range
	AllowRange   hcl.Range
	TLSNameRange hcl.Range
	tlsSet       bool
}

// Agent is a relay host attached to a switch port.
type Agent struct {
	Name         string
	Site         string
	Node         string
	Switch       string
	SwitchPort   uint32
	MAC          net.HardwareAddr
	Address      netip.Addr
	Interface    string
	DataPort     uint16
	RelayPort    uint16 // the transparent (TPROXY) listener
	HealthListen string
	// HealthAllow lists the source prefixes the health port accepts (the
	// controller nodes'); empty accepts any.
	HealthAllow []netip.Prefix
	// HealthAllowUsers are the local users (names or uids) whose
	// connections from this node HealthAllow admits besides root's.
	HealthAllowUsers []string
	Tuning           []string
	// PublicKey, with per-agent keys, is the agent's static X25519 public
	// key (public_key, as `sosappliance keygen` prints it) and KeyFile
	// where its node holds the private key (key_file, default
	// DefaultAgentKeyFile). Nil: the PSK alone authenticates its streams.
	PublicKey []byte
	KeyFile   string
	// SteeringMark, SteeringTable and SteeringPriority are the packet
	// mark, policy-routing table and rule priority of the node's TPROXY
	// steering (steering_mark, steering_table, steering_priority); 0
	// takes the defaults (0x534f, 21327, 21327). Set them when the host's
	// own policy routing uses those numbers.
	SteeringMark, SteeringTable, SteeringPriority uint32

	Range            hcl.Range
	PublicKeyRange   hcl.Range
	KeyFileRange     hcl.Range
	SwitchRange      hcl.Range
	SwitchPortRange  hcl.Range
	TuningRange      hcl.Range
	HealthAllowRange hcl.Range
}

// DataAddr is where the agent's peers open stripe streams.
func (a *Agent) DataAddr() netip.AddrPort { return netip.AddrPortFrom(a.Address, a.DataPort) }

// Whitelist is one class of TCP connections to accelerate: from hosts in
// Clients to hosts in Servers on one of Ports, and with DirectionBoth also
// from hosts in Servers to hosts in Clients on one of Ports.
type Whitelist struct {
	Name    string
	Clients []netip.Prefix
	// Servers are the server hosts and networks: server = "A" is [A/32].
	Servers []netip.Prefix
	// Ports are the ports of the listening side, sorted and merged: the
	// server's for connections clients open, the client's for those
	// servers open (DirectionBoth). server_port = P is [P-P]; without a
	// port list it is [1-65535] and AllPorts is set.
	Ports    []portrange.Range
	AllPorts bool
	// Direction says who opens the connections: DirectionClient, or
	// DirectionBoth for servers too.
	Direction string
	// Server and ServerPort are the one server address and port of a
	// whitelist that names exactly one of each; zero otherwise.
	Server     netip.Addr
	ServerPort uint16
	// Streams is the session's stream count; with AutoStreams
	// (streams = "auto") it is max_streams, the most a session opens:
	// each starts with a few and opens more while they raise its rate.
	// Memory and limit checks count the maximum.
	Streams     int
	AutoStreams bool
	ChunkSize   int
	// QueueLength, when not 0, bounds a session's receive window at
	// queue_length x streams chunks (never below the initial window).
	// It no longer sizes throughput: the window follows the path (byte
	// credit, autotuned from delivery rate x RTT, see dataplane/stripe).
	QueueLength int
	// ClientAgent and ServerAgent are the agents that carry the session; when
	// the file leaves them out they resolve to the only agent of the site.
	// With DirectionBoth they keep their names: the server-site agent is
	// the one a server's connection reaches first.
	ClientAgent string
	ServerAgent string
	// ClientAgents and ServerAgents are every agent of the site that
	// carries the whitelist, in the order the site declares them (the
	// order sdn/spread deals buckets in): client_agents/server_agents as
	// written, [client_agent] when that is set, or else all the site's
	// agents. ClientAgent and ServerAgent are their first entries.
	ClientAgents []string
	ServerAgents []string
	ClientSite   string
	ServerSite   string

	Range        hcl.Range
	ClientsRange hcl.Range
	// clientsUnread is set when an entry of clients (or the list) could
	// not be read: reported, and no cause to say it has none.
	clientsUnread   bool
	ServerRange     hcl.Range
	PortsRange      hcl.Range
	StreamsRange    hcl.Range
	MaxStreamsRange hcl.Range
	// AgentRanges is where client_agent(s) and server_agent(s) are set,
	// by argument name.
	AgentRanges map[string]hcl.Range
}

// Whitelist directions.
const (
	DirectionClient = "client"
	DirectionBoth   = "both"
)

// Both reports whether servers' connections toward clients are carried too.
func (w *Whitelist) Both() bool { return w.Direction == DirectionBoth }

// SessionMemory is the buffer memory one session of this whitelist needs
// at an agent when it starts: its initial receive window (4 MiB of chunks,
// at least one per stream), plus the send queue and read buffers. The
// window then grows with the path as far as limits.session_memory and
// limits.memory allow. It is the relay's own figure, so a config that
// validates is never refused at run time.
func (w *Whitelist) SessionMemory() int64 {
	return stripe.SessionMemory(w.Streams, w.ChunkSize, stripe.InitialFrames(w.Streams, w.ChunkSize))
}

// Tuning is a named host tuning profile. With Base set, Sysctl and the
// interfaces' MTU hold the built-in profile's values (package profiles)
// for every key the file leaves out; the origins say which is which.
type Tuning struct {
	Name              string
	Base              string // a built-in profile, or empty
	Sysctl            map[string]string
	Interfaces        []*InterfaceTuning
	RelayCPUs         []int
	RelayCPUsRange    hcl.Range
	CongestionControl string // per stream socket; empty keeps the host default
	SocketBuffer      int64  // per stream socket; 0 sizes it from the whitelist
	Range             hcl.Range
	BaseRange         hcl.Range
	SysctlRanges      map[string]hcl.Range // the keys the file sets
	// SysctlOrigins says where each value of Sysctl came from.
	SysctlOrigins map[string]Origin
	// Notes are the base profile's advice that is no single value.
	Notes []string
}

// InterfaceTuning holds NIC settings of one interface.
type InterfaceTuning struct {
	Name       string
	MTU        int // 0: leave alone
	TxQueueLen int // -1: leave alone
	IRQCPUs    []int
	Range      hcl.Range
	// Where each setting came from: the file, or for MTU and txqueuelen the
	// base profile.
	MTUOrigin, TxQueueLenOrigin, IRQOrigin Origin
}

// Origin is where a tuning value came from: a line of the file, or a
// built-in profile that a tuning block's base names.
type Origin struct {
	// Profile is the built-in profile's name; empty for a value the file
	// sets.
	Profile string
	// Range is the file's argument, or for a profile's value the base
	// argument that brought it in.
	Range hcl.Range
	// Source is the page a profile's value comes from.
	Source string
	// Optional is set for a profile value a node's kernel may lack (the
	// fq qdisc): planning leaves it out there, with a warning.
	Optional bool
}

// String is how plans show the origin: "sos.hcl:31" for the file,
// "profile fasterdata-10g (sos.hcl:28)" for a profile.
func (o Origin) String() string {
	at := fmt.Sprintf("%s:%d", o.Range.Filename, o.Range.Start.Line)
	if o.Profile != "" {
		return fmt.Sprintf("profile %s (%s)", o.Profile, at)
	}
	return at
}

func fileOrigin(rng hcl.Range) Origin { return Origin{Range: rng} }

// Node declares extra tuning for a node that runs no agent, such as the
// controller host.
type Node struct {
	Name        string
	Tuning      []string
	Range       hcl.Range
	TuningRange hcl.Range
}

// Site returns the site of that name, or nil.
func (c *Config) Site(name string) *Site {
	for _, s := range c.Sites {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Agent returns the agent of that name, or nil.
func (c *Config) Agent(name string) *Agent {
	for _, s := range c.Sites {
		for _, a := range s.Agents {
			if a.Name == name {
				return a
			}
		}
	}
	return nil
}

// Switch returns the switch of that name, or nil.
func (c *Config) Switch(name string) *Switch {
	for _, s := range c.Sites {
		for _, sw := range s.Switches {
			if sw.Name == name {
				return sw
			}
		}
	}
	return nil
}

// Tuning returns the tuning profile of that name, or nil.
func (c *Config) Tuning(name string) *Tuning {
	for _, t := range c.Tunings {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// SiteOf returns the site whose prefixes contain addr, or nil.
func (c *Config) SiteOf(addr netip.Addr) *Site {
	for _, s := range c.Sites {
		for _, p := range s.Prefixes {
			if p.Contains(addr) {
				return s
			}
		}
	}
	return nil
}

// Describe says in one line what the whitelist carries, for validate:
// `10.10.1.0/24 -> 10.10.2.16/28 ports 2811,50000-51000 (either side opens), agent-a -> agent-b`.
func (w *Whitelist) Describe() string {
	join := func(ps []netip.Prefix) string {
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = serverText(p)
		}
		return strings.Join(parts, ",")
	}
	ports := "ports " + portrange.Join(w.Ports)
	if w.AllPorts {
		ports = "every port"
	}
	who := "clients open"
	if w.Both() {
		who = "either side opens; the port is the listening side's"
	}
	agents := func(names []string, one string) string {
		if len(names) > 1 {
			return "{" + strings.Join(names, ",") + "}"
		}
		return one
	}
	return fmt.Sprintf("%s -> %s %s (%s), %s -> %s", join(w.Clients), join(w.Servers), ports, who,
		agents(w.ClientAgents, w.ClientAgent), agents(w.ServerAgents, w.ServerAgent))
}
