package labnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/zclconf/go-cty/cty"

	"github.com/sosappliance/sosappliance/appliance/config"
)

// With Options.Agents = 2 (`lab up --agents 2`) every site of the lab runs
// a second agent in its own namespace on its site's switch, and the client
// site gets a second client, so that connections from two hosts spread
// over both agent pairs. The lab's whitelists name no agents, so each uses
// every agent of its sites (config: spread).

// maxAgentsPerSite is what the lab wires: one or two agents on each switch.
const maxAgentsPerSite = 2

// The second client of a lab with two agents per site, at the first site
// beside the first client.
const Client2 Host = "client-2"

var (
	// Client2Addr is the second client's address.
	Client2Addr = netip.MustParseAddr("10.10.1.11")
	client2MAC  = "02:5a:00:00:01:0b"
)

// secondAgentPort is the switch port of the agent the lab adds to a site.
const secondAgentPort = 5

// agentHost names the namespace of a site's agent j: the first agent's
// host, then "agent-a2" and so on.
func agentHost(first Host, j int) Host {
	if j == 0 {
		return first
	}
	return Host(string(first) + strconv.Itoa(j+1))
}

// agentPortName is the switch-side veth of a site's agent j.
func agentPortName(letter string, j int) string {
	if j == 0 {
		return letter + "-agent"
	}
	return letter + "-agent" + strconv.Itoa(j+1)
}

// secondClient reports whether the lab has the second client: when the
// client site has more than one agent.
func (l *Lab) secondClient() bool { return len(l.sites) > 0 && len(l.sites[0].agents) > 1 }

// endHosts are the client and server hosts that run with stock TCP
// settings: the client, the server and the second client if there is one.
func (l *Lab) endHosts() []Host {
	hs := []Host{Client, Server}
	if l.secondClient() {
		hs = append(hs, Client2)
	}
	return hs
}

// Clients are the lab's client hosts: the client, and with two agents per
// site the second client.
func (l *Lab) Clients() []Host {
	if l.secondClient() {
		return []Host{Client, Client2}
	}
	return []Host{Client}
}

// ClientAddrOf is the IPv4 address of a client host.
func ClientAddrOf(h Host) netip.Addr {
	if h == Client2 {
		return Client2Addr
	}
	return ClientAddr
}

// SiteAgents are the agent nodes of site i (0 is the client's, 1 the
// server's) in the config's order, which is the order the spread deals
// buckets in.
func (l *Lab) SiteAgents(i int) []Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i < 0 || i >= len(l.sites) {
		return nil
	}
	s := l.sites[i]
	nodes := make([]Node, len(s.agents))
	for j, ag := range s.agents {
		nodes[j] = Node{Name: ag.Node, Host: s.agentHosts[j], Agent: ag}
	}
	return nodes
}

// AgentSteered reports whether the switch of the agent's site steers any
// connection of port to the agent: requests (tp_dst) at the client site,
// replies (tp_src) at the server site.
func (l *Lab) AgentSteered(ctx context.Context, agent string, port int) (bool, error) {
	l.mu.Lock()
	sites := l.sites
	l.mu.Unlock()
	for i, s := range sites {
		for _, ag := range s.agents {
			if ag.Name != agent {
				continue
			}
			match := "tp_dst=" + strconv.Itoa(port)
			if i > 0 {
				match = "tp_src=" + strconv.Itoa(port)
			}
			dump, err := l.ovs.ofctl(ctx, "dump-flows", s.sw.Name)
			if err != nil {
				return false, err
			}
			return hasSteering(dump, match, ag), nil
		}
	}
	return false, fmt.Errorf("no lab agent %q", agent)
}

// addSecondAgents gives every site of the lab's copy of the config that
// declares one agent a second one like it: the same switch, interface and
// tuning, on switch port 5, with the next MAC and address and the name and
// node with a "2" appended.
func (c *ConfigFile) addSecondAgents(cfg *config.Config) error {
	body := c.file.Body()
	for _, s := range cfg.Sites {
		if len(s.Agents) != 1 {
			continue
		}
		first := s.Agents[0]
		sb := body.FirstMatchingBlock("site", []string{s.Name})
		if sb == nil {
			return fmt.Errorf("site %q: block not found", s.Name)
		}
		ab := sb.Body().FirstMatchingBlock("agent", []string{first.Name})
		if ab == nil {
			return fmt.Errorf("site %q: agent block %q not found", s.Name, first.Name)
		}
		mac := append(net.HardwareAddr(nil), first.MAC...)
		mac[len(mac)-1]++
		sb.Body().AppendNewline()
		nb := sb.Body().AppendNewBlock("agent", []string{first.Name + "2"}).Body()
		attrs := ab.Body().Attributes()
		for _, name := range sortedKeys(attrs) {
			if name == "health_listen" {
				continue // the default, on the second agent's own address
			}
			nb.SetAttributeRaw(name, attrs[name].Expr().BuildTokens(nil))
		}
		nb.SetAttributeValue("node", cty.StringVal(first.Node+"2"))
		nb.SetAttributeValue("switch_port", cty.NumberIntVal(secondAgentPort))
		nb.SetAttributeValue("mac", cty.StringVal(mac.String()))
		nb.SetAttributeValue("address", cty.StringVal(first.Address.Next().String()))
	}
	return nil
}
