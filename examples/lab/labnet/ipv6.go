package labnet

import (
	"context"
	"fmt"
	"net/netip"
)

// IPv6 addresses of the dual-stack lab: when the config gives the sites
// IPv6 prefixes holding ClientAddr6 and ServerAddr6, the end hosts and the
// agents get these on their lab interfaces, inside one on-link /48 as the
// IPv4 addresses share one /16.
var (
	ClientAddr6 = netip.MustParseAddr("fd10:10:0:1::10")
	ServerAddr6 = netip.MustParseAddr("fd10:10:0:2::10")
	// agentAddrs6 are the agents' addresses, by site.
	agentAddrs6 = [2]netip.Addr{netip.MustParseAddr("fd10:10:0:1::2"), netip.MustParseAddr("fd10:10:0:2::2")}
)

// PrefixLen6 is the length of the lab's shared IPv6 prefix.
const PrefixLen6 = 48

// DualStack reports whether the lab runs IPv6 beside IPv4: its config
// puts the IPv6 client and server in the two sites.
func (l *Lab) DualStack() bool {
	return l.cfg.SiteOf(ClientAddr6) == l.cfg.Sites[0] && l.cfg.SiteOf(ServerAddr6) == l.cfg.Sites[1]
}

// enableIPv6 turns IPv6 on for the lab interfaces of the end hosts and the
// agents (and their loopback, where the agents' IPv6 steering route
// lives) of a dual-stack lab. The hosts know each other's MAC addresses
// from static neighbour entries and send no router solicitations, so no
// neighbour discovery crosses the emulated WAN.
func (l *Lab) enableIPv6(ctx context.Context) error {
	if !l.DualStack() {
		return nil
	}
	type host struct {
		ns, dev, mac string
		addr         netip.Addr
	}
	var hosts []host
	for i, s := range l.sites[:2] {
		addr := ClientAddr6
		if i == 1 {
			addr = ServerAddr6
		}
		hosts = append(hosts, host{l.Namespace(s.host), "eth0", s.hostMAC, addr})
		for j, ag := range s.agents {
			// The second agent takes the address after the first's.
			a := agentAddrs6[i]
			for range j {
				a = a.Next()
			}
			hosts = append(hosts, host{l.Namespace(s.agentHosts[j]), ag.Interface, ag.MAC.String(), a})
		}
	}
	for _, h := range hosts {
		if _, err := runIn(ctx, h.ns, "sysctl", "-q", "-w",
			"net.ipv6.conf.lo.disable_ipv6=0",
			"net.ipv6.conf."+h.dev+".accept_ra=0",
			"net.ipv6.conf."+h.dev+".router_solicitations=0",
			"net.ipv6.conf."+h.dev+".accept_dad=0",
			"net.ipv6.conf."+h.dev+".disable_ipv6=0"); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", h.ns, "-6", "addr", "add", netip.PrefixFrom(h.addr, PrefixLen6).String(), "dev", h.dev, "nodad"); err != nil {
			return err
		}
	}
	for _, h := range hosts {
		for _, o := range hosts {
			if o.ns == h.ns {
				continue
			}
			if _, err := run(ctx, "ip", "-n", h.ns, "-6", "neigh", "replace", o.addr.String(), "lladdr", o.mac, "dev", h.dev, "nud", "permanent"); err != nil {
				return fmt.Errorf("neighbour %s in %s: %w", o.addr, h.ns, err)
			}
		}
	}
	return nil
}
