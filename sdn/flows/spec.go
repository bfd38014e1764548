// Package flows turns the steering intent of the configuration into the
// OpenFlow 1.3 flow set each switch must carry, and diffs flow sets. It is
// pure: no I/O, no logging.
package flows

import (
	"net"
	"net/netip"

	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// Side says which end of a whitelisted connection a steering rule serves.
type Side string

const (
	// ClientSide steers client -> server packets to the client site's agent.
	ClientSide Side = "client"
	// ServerSide steers server -> client replies to the server site's agent.
	ServerSide Side = "server"
)

// Agent is an agent attached to a switch port.
type Agent struct {
	Name string
	MAC  net.HardwareAddr
	Port uint32 // switch port number
}

// Steer is one steering intent on one switch: TCP matching the whitelist in
// the direction given by Side is rewritten to the agent's MAC and output to
// its port.
type Steer struct {
	Whitelist string
	Side      Side
	Clients   []netip.Prefix
	// Servers and Ports are the server hosts or networks and the
	// listening ports (ranges); when empty, Server and Port name the one
	// server and port.
	Servers []netip.Prefix
	Ports   []portrange.Range
	Server  netip.Addr
	Port    uint16
	// Reverse marks the steering of connections opened by the whitelist's
	// servers (direction = "both"): Clients then hold the servers that
	// open them and Servers the whitelist's clients that listen.
	Reverse bool
	Agent   Agent
	// Agents, when not empty, are every agent of this side's site that
	// carries the whitelist, in the configuration's order: the steer is
	// then spread over them by package spread (Agent is ignored), each
	// agent matching only its buckets, by the connection opener's TCP
	// port (tcp_src on the client side, tcp_dst on the server side) or
	// address.
	Agents []Agent
	Spread spread.Mode
	// SpreadBits is the bucket count's log2.
	SpreadBits int
	// Down names the agents of Agents that are down: their buckets are
	// dealt to the live ones (fail-over). FailOpen sets it.
	Down []string
	// Pins are live sessions a live agent holds in a bucket that is no
	// longer its own: each keeps an exact-match flow to it (PinSessions).
	Pins []Pin
	// DependsOn names every agent whose failure must withdraw this rule
	// (fail-open): the agents at both ends of the whitelist.
	DependsOn []string
	// DependsOnSites are groups of agents (each site's agents of the
	// whitelist): the rule is withdrawn only when every agent of a group
	// is down.
	DependsOnSites [][]string
	// Unsteered lists agent addresses inside Clients whose replies from
	// the server are never steered (server side only): a client-side agent
	// that cannot open its stripes carries a connection direct from its
	// own address, and the server's answers to it must reach it, not the
	// server site's agent, which holds no socket for them.
	Unsteered []netip.Addr
}

// Pin keeps one live session on the agent that holds it.
type Pin struct {
	Client, Server netip.AddrPort
	Agent          Agent
}

// Switch is everything one switch must carry.
type Switch struct {
	Name       string
	DatapathID uint64
	// Forwarding is the action for everything else: "normal".
	Forwarding string
	// Connect is empty when the switch dials the controller, or
	// "tcp:IP:PORT" when the controller dials a switch that listens with
	// ptcp:. It is not part of the flow set; the controller reads it.
	Connect string
	// TLS requires the switch to connect over TLS with a certificate the
	// controller's CA signed; Allow, when not empty, lists the source
	// prefixes it may connect from. Like Connect, the controller reads
	// them; they are not part of the flow set.
	TLS   bool
	Allow []netip.Prefix
	// TLSName, when not empty, is the name the switch's certificate must
	// carry (its common name, ovs-pki's "NAME id:UUID", or a DNS name):
	// a certificate of the same CA issued to another name cannot claim
	// this switch's datapath id. It needs TLS.
	TLSName string
	// Agents are bypassed: packets arriving from their ports go to normal
	// forwarding at the highest priority so agents are never looped.
	Agents []Agent
	Steers []Steer
	// NoPortMasks says the switch cannot match TCP ports under a mask:
	// a port range then takes one flow per port instead of one per
	// aligned block.
	NoPortMasks bool
}
