package tuning

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// passOnHost is a host of the pass-rule topology: a namespace with one
// interface on the bridge.
type passOnHost struct {
	ns        string // "" for the test's own namespace (the agent)
	mac       string
	v4, v6    netip.Addr
	ifname    string
	bridgeEnd string
}

func (h passOnHost) ip(t *testing.T, args ...string) {
	t.Helper()
	if h.ns != "" {
		args = append([]string{"-n", h.ns}, args...)
	}
	run(t, "ip", args...)
}

// inNs runs fn in the host's namespace.
func (h passOnHost) inNs(fn func() error) error {
	if h.ns == "" {
		return fn()
	}
	return RunInNamedNetns(h.ns, fn)
}

// An agent's pass rules, on real packets: the agent is this (fresh)
// namespace, a client and a server are namespaces beside it on one bridge,
// and each has its neighbour entry for the other pointed at the agent's
// MAC, as the switches' steering rewrites the destination MAC. The agent
// does not forward (ip_forward and IPv6 forwarding are 0), so only its
// steering table can send a packet on. In both families:
//   - a connection the server opens from a port in the whitelist's range
//     (its packets match the reply's sets, the client's answers the
//     divert's but are no first SYN) gets through and carries data;
//   - one from a port outside the range is not sent on: the agent forwards
//     nothing its sets do not name;
//   - a connection the client opens to the server is still diverted to the
//     transparent listener, and none of its later packets leak to the
//     server (which listens on the same port and would reset it);
//   - a connection from the server to the agent's own address, inside the
//     whitelist's clients, reaches the agent.
func TestPassRulesSendOnInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	agent, client, server := passOnLAN(t, "sosp")
	// The server reaches the agent's own addresses as they are.
	for _, a := range []netip.Addr{agent.v4, agent.v6} {
		server.ip(t, "neigh", "replace", a.String(), "lladdr", agent.mac, "dev", server.ifname, "nud", "permanent")
	}

	ports := []portrange.Range{{Lo: 50000, Hi: 51000}}
	sel := func(clients, servers string) item.Divert {
		return item.Divert{Clients: []netip.Prefix{netip.MustParsePrefix(clients)}, Servers: []netip.Prefix{netip.MustParsePrefix(servers)}, Ports: ports}
	}
	spec := item.SteeringSpec{Interface: agent.ifname, ListenPort: 9876,
		Divert:  []item.Divert{sel("10.9.1.0/24", "10.9.5.16/28"), sel("fd09::1:0/112", "fd09::5:0/112")},
		Replies: []item.Divert{sel("10.9.1.0/24", "10.9.5.16/28"), sel("fd09::1:0/112", "fd09::5:0/112")},
	}
	applySpec(t, spec)

	// echo answers each connection's line with the address it was
	// accepted on.
	echo := func(h passOnHost, network, addr string) {
		serveLines(t, listenIn(t, h, network, addr), func(c net.Conn, line []byte) {
			fmt.Fprintf(c, "%s %s", c.LocalAddr(), line)
		})
	}
	// exchange dials to from h (from local port sport, 0 for any) and
	// returns what the far end answered to one line.
	exchange := func(h passOnHost, from netip.Addr, sport int, to netip.AddrPort, timeout time.Duration) (string, error) {
		var got string
		err := h.inNs(func() error {
			d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: from.AsSlice(), Port: sport}}
			c, err := d.Dial("tcp", to.String())
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(timeout))
			if _, err := io.WriteString(c, "hello\n"); err != nil {
				return err
			}
			b, err := io.ReadAll(c)
			got = string(b)
			return err
		})
		return got, err
	}
	for _, fam := range []struct {
		name, network       string
		client, server, agt netip.Addr
	}{
		{"IPv4", "tcp4", client.v4, server.v4, agent.v4},
		{"IPv6", "tcp6", client.v6, server.v6, agent.v6},
	} {
		echo(client, fam.network, netip.AddrPortFrom(fam.client, 22).String())
		echo(server, fam.network, netip.AddrPortFrom(fam.server, 50500).String())
		echo(agent, fam.network, netip.AddrPortFrom(fam.agt, 2222).String())
		toClient := netip.AddrPortFrom(fam.client, 22)
		for _, sport := range []int{50000, 50123, 51000} {
			got, err := exchange(server, fam.server, sport, toClient, 5*time.Second)
			if want := toClient.String() + " hello\n"; err != nil || got != want {
				t.Errorf("%s: server -> client:22 from port %d, in the range: %q, %v; want %q", fam.name, sport, got, err, want)
			}
		}
		if got, err := exchange(server, fam.server, 40000, toClient, 1500*time.Millisecond); err == nil {
			t.Errorf("%s: server -> client:22 from port 40000, outside the range, was sent on by the agent: %q", fam.name, got)
		}
		toAgent := netip.AddrPortFrom(fam.agt, 2222)
		if got, err := exchange(server, fam.server, 50200, toAgent, 5*time.Second); err != nil || got != toAgent.String()+" hello\n" {
			t.Errorf("%s: server -> the agent's own address from port 50200: %q, %v", fam.name, got, err)
		}
	}

	// The client's connections to the server are diverted to the
	// transparent listener, which answers with the address it accepted
	// on; the server's echo would answer the same, so the listener marks
	// its answers.
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := "0.0.0.0:9876"
		if network == "tcp6" {
			addr = "[::]:9876"
		}
		// Enough bytes that the answer takes several segments and
		// acks.
		serveLines(t, transparentListenerOn(t, network, addr), func(c net.Conn, line []byte) {
			fmt.Fprintf(c, "agent %s %s%s", c.LocalAddr(), line, strings.Repeat("x", 100000))
		})
	}
	for _, a := range []netip.Addr{server.v4, server.v6} {
		to := netip.AddrPortFrom(a, 50500)
		got, err := exchange(client, map[bool]netip.Addr{true: client.v4, false: client.v6}[a.Is4()], 0, to, 5*time.Second)
		if want := "agent " + to.String() + " hello\n" + strings.Repeat("x", 100000); err != nil || got != want {
			t.Errorf("client -> %s, whitelisted: %d bytes %q..., %v; want the transparent listener's %d bytes", to, len(got), got[:min(len(got), 40)], err, len(want))
		}
	}
}

// passOnLAN makes the pass-rule topology: the agent is this (fresh)
// namespace, a client and a server are namespaces beside it on one bridge
// (names starting with prefix), and each has its neighbour entry for the
// other pointed at the agent's MAC, as the switches' steering rewrites
// the destination MAC. The agent does not forward.
func passOnLAN(t *testing.T, prefix string) (agent, client, server passOnHost) {
	t.Helper()
	pid := os.Getpid()
	sw := fmt.Sprintf("%ssw%d", prefix, pid)
	agent = passOnHost{"", "02:00:00:00:09:01", netip.MustParseAddr("10.9.1.1"), netip.MustParseAddr("fd09::1:1"), "sosa0", "pa"}
	client = passOnHost{fmt.Sprintf("%sc%d", prefix, pid), "02:00:00:00:09:02", netip.MustParseAddr("10.9.1.10"), netip.MustParseAddr("fd09::1:10"), "sosc0", "pc"}
	server = passOnHost{fmt.Sprintf("%ss%d", prefix, pid), "02:00:00:00:09:03", netip.MustParseAddr("10.9.5.20"), netip.MustParseAddr("fd09::5:20"), "soss0", "ps"}
	for _, ns := range []string{sw, client.ns, server.ns} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", sw, "link", "set", "br0", "up")
	run(t, "ip", "link", "set", "lo", "up")
	for _, h := range []passOnHost{agent, client, server} {
		h.ip(t, "link", "add", h.ifname, "type", "veth", "peer", "name", h.bridgeEnd, "netns", sw)
		run(t, "ip", "-n", sw, "link", "set", h.bridgeEnd, "master", "br0", "up")
		h.ip(t, "link", "set", h.ifname, "address", h.mac)
		h.ip(t, "addr", "add", h.v4.String()+"/16", "dev", h.ifname)
		h.ip(t, "addr", "add", h.v6.String()+"/64", "dev", h.ifname, "nodad")
		h.ip(t, "link", "set", h.ifname, "up")
		h.ip(t, "link", "set", "lo", "up")
	}
	neigh := func(h passOnHost, a netip.Addr, mac string) {
		h.ip(t, "neigh", "replace", a.String(), "lladdr", mac, "dev", h.ifname, "nud", "permanent")
	}
	for _, a := range []netip.Addr{server.v4, server.v6} {
		neigh(client, a, agent.mac)
		neigh(agent, a, server.mac)
	}
	for _, a := range []netip.Addr{client.v4, client.v6} {
		neigh(server, a, agent.mac)
		neigh(agent, a, client.mac)
	}
	for _, key := range []string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"} {
		if got := strings.TrimSpace(run(t, "sysctl", "-n", key)); got != "0" {
			t.Fatalf("%s = %s in the agent's namespace; the test needs it 0", key, got)
		}
	}
	return agent, client, server
}

// listenIn listens on addr in h's namespace until the test ends.
func listenIn(t *testing.T, h passOnHost, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := h.inNs(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveLines answers the first read of each connection ln accepts with
// answer, and closes it.
func serveLines(t *testing.T, ln net.Listener, answer func(c net.Conn, line []byte)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 128)
				if n, err := c.Read(b); err == nil {
					answer(c, b[:n])
				}
			}()
		}
	}()
}
