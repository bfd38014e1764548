package tuning

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The pass and divert rules under crafted packets (review, helper-110). Frames are
// injected with AF_PACKET straight to the agent's MAC (as any host on the
// agent's LAN can, switch or no switch) and counted with AF_PACKET where
// they leave the agent and where they arrive.

// r110Sock is an AF_PACKET socket bound to one interface.
type r110Sock struct {
	fd  int
	mac net.HardwareAddr
}

func r110Open(t *testing.T, h passOnHost) *r110Sock {
	t.Helper()
	var s *r110Sock
	err := h.inNs(func() error {
		ifi, err := net.InterfaceByName(h.ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(r110Htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: r110Htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		s = &r110Sock{fd: fd, mac: ifi.HardwareAddr}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

func r110Htons(v uint16) uint16 { return v<<8 | v>>8 }

// r110Frame is a captured frame: its packet type (PACKET_OUTGOING for
// what the host sent) and bytes.
type r110Frame struct {
	pkttype uint8
	b       []byte
}

// drain returns what the socket holds now, and the kernel's drop count.
func (s *r110Sock) drain() ([]r110Frame, uint32) {
	var out []r110Frame
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		ll, _ := from.(*unix.SockaddrLinklayer)
		var pt uint8
		if ll != nil {
			pt = ll.Pkttype
		}
		out = append(out, r110Frame{pt, append([]byte(nil), buf[:n]...)})
	}
	st, _ := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	var drops uint32
	if st != nil {
		drops = st.Drops
	}
	return out, drops
}

func (s *r110Sock) send(t *testing.T, frame []byte) {
	t.Helper()
	if _, err := unix.Write(s.fd, frame); err != nil {
		t.Fatal(err)
	}
}

func r110Csum(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func r110Fold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// r110TCP is a TCP header and payload with its checksum for src and dst.
func r110TCP(src, dst netip.Addr, sport, dport uint16, flags byte, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint32(h[4:], 0x11223344)
	if flags&0x10 != 0 {
		binary.BigEndian.PutUint32(h[8:], 0x55667788)
	}
	h[12] = 5 << 4
	h[13] = flags
	binary.BigEndian.PutUint16(h[14:], 65535)
	h = append(h, payload...)
	var sum uint32
	sum = r110Csum(sum, src.AsSlice())
	sum = r110Csum(sum, dst.AsSlice())
	sum += uint32(unix.IPPROTO_TCP) + uint32(len(h))
	sum = r110Csum(sum, h)
	binary.BigEndian.PutUint16(h[16:], r110Fold(sum))
	return h
}

// r110IPv4 is an Ethernet frame of an IPv4 packet carrying l4 (or a part
// of it, at fragment offset off bytes, more fragments to come).
func r110IPv4(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, ttl byte, l4 []byte, off int, more bool) []byte {
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(ip[4:], 0x4242)
	fo := uint16(off / 8)
	if more {
		fo |= 0x2000
	}
	binary.BigEndian.PutUint16(ip[6:], fo)
	ip[8] = ttl
	ip[9] = unix.IPPROTO_TCP
	copy(ip[12:], src.AsSlice())
	copy(ip[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], r110Fold(r110Csum(0, ip)))
	return append(append(r110Eth(dstMAC, srcMAC, 0x0800), ip...), l4...)
}

// r110IPv6 is an Ethernet frame of an IPv6 packet carrying a TCP segment,
// behind a destination options header when destOpts.
func r110IPv6(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, hops byte, l4 []byte, destOpts bool) []byte {
	var ext []byte
	next := byte(unix.IPPROTO_TCP)
	if destOpts {
		ext = []byte{unix.IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0} // PadN
		next = unix.IPPROTO_DSTOPTS
	}
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+len(l4)))
	ip[6] = next
	ip[7] = hops
	copy(ip[8:], src.AsSlice())
	copy(ip[24:], dst.AsSlice())
	return append(append(append(r110Eth(dstMAC, srcMAC, 0x86dd), ip...), ext...), l4...)
}

func r110Eth(dst, src net.HardwareAddr, typ uint16) []byte {
	b := make([]byte, 14)
	copy(b, dst)
	copy(b[6:], src)
	binary.BigEndian.PutUint16(b[12:], typ)
	return b
}

// r110Pkt is what a captured frame says of its IP and TCP headers.
type r110Pkt struct {
	src, dst     netip.Addr
	ttl          byte
	fragment     bool // IPv4: offset or more-fragments set
	payloadBytes int  // IP payload bytes
	sport, dport uint16
	flags        byte
	hasTCP       bool
}

func r110Parse(b []byte) (r110Pkt, bool) {
	var p r110Pkt
	if len(b) < 14 {
		return p, false
	}
	typ := binary.BigEndian.Uint16(b[12:])
	b = b[14:]
	var l4 []byte
	switch typ {
	case 0x0800:
		if len(b) < 20 || b[9] != unix.IPPROTO_TCP {
			return p, false
		}
		ihl := int(b[0]&0xf) * 4
		p.src, _ = netip.AddrFromSlice(b[12:16])
		p.dst, _ = netip.AddrFromSlice(b[16:20])
		p.ttl = b[8]
		fo := binary.BigEndian.Uint16(b[6:])
		p.fragment = fo&0x3fff != 0
		tot := int(binary.BigEndian.Uint16(b[2:]))
		p.payloadBytes = tot - ihl
		if fo&0x1fff == 0 {
			l4 = b[ihl:]
		}
	case 0x86dd:
		if len(b) < 40 {
			return p, false
		}
		p.src, _ = netip.AddrFromSlice(b[8:24])
		p.dst, _ = netip.AddrFromSlice(b[24:40])
		p.ttl = b[7]
		p.payloadBytes = int(binary.BigEndian.Uint16(b[4:]))
		next, rest := b[6], b[40:]
		for next == unix.IPPROTO_DSTOPTS || next == unix.IPPROTO_HOPOPTS {
			if len(rest) < 8 {
				return p, false
			}
			n := (int(rest[1]) + 1) * 8
			next, rest = rest[0], rest[n:]
		}
		if next != unix.IPPROTO_TCP {
			return p, false
		}
		l4 = rest
	default:
		return p, false
	}
	if len(l4) >= 20 {
		p.hasTCP = true
		p.sport = binary.BigEndian.Uint16(l4[0:])
		p.dport = binary.BigEndian.Uint16(l4[2:])
		p.flags = l4[13]
	}
	return p, true
}

// r110Count drains s and keeps the frames with source src and
// destination dst (and, when out, only those the host sent).
func r110Count(s *r110Sock, src, dst netip.Addr, out bool) ([]r110Pkt, uint32) {
	frames, drops := s.drain()
	var got []r110Pkt
	for _, f := range frames {
		if out != (f.pkttype == unix.PACKET_OUTGOING) {
			continue
		}
		if p, ok := r110Parse(f.b); ok && p.src == src && p.dst == dst {
			got = append(got, p)
		}
	}
	return got, drops
}

// r110Net is the topology: the agent is this (fresh) namespace, a client
// and a server beside it on a bridge, each with its neighbour entry for the
// other pointed at the agent's MAC; the agent also has a management
// interface with one host on it. Sockets capture on every interface.
type r110Net struct {
	agent, client, server, mhost   passOnHost
	spec                           item.SteeringSpec
	aSock, cSock, sSock, mSock     *r110Sock
	agentMAC, serverMAC, clientMAC net.HardwareAddr
}

func r110Topology(t *testing.T) *r110Net {
	agent, client, server := passOnLAN(t, "r110")
	mgmt := fmt.Sprintf("r110m%d", os.Getpid())
	run(t, "ip", "netns", "add", mgmt)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", mgmt).Run() })
	// The agent's other interface: a management network, 10.77.0.0/24,
	// with one host on it.
	mhost := passOnHost{mgmt, "02:00:00:00:0a:04", netip.MustParseAddr("10.77.0.5"), netip.Addr{}, "sosm1", ""}
	run(t, "ip", "link", "add", "sosm0", "type", "veth", "peer", "name", "sosm1", "netns", mgmt)
	run(t, "ip", "addr", "add", "10.77.0.1/24", "dev", "sosm0")
	run(t, "ip", "link", "set", "sosm0", "up")
	run(t, "ip", "-n", mgmt, "link", "set", "sosm1", "address", mhost.mac)
	run(t, "ip", "-n", mgmt, "addr", "add", "10.77.0.5/24", "dev", "sosm1")
	run(t, "ip", "-n", mgmt, "link", "set", "sosm1", "up")
	run(t, "ip", "neigh", "replace", "10.77.0.5", "lladdr", mhost.mac, "dev", "sosm0", "nud", "permanent")
	ports := []portrange.Range{{Lo: 50000, Hi: 51000}}
	sel := func(clients []string, servers string) item.Divert {
		var cs []netip.Prefix
		for _, c := range clients {
			cs = append(cs, netip.MustParsePrefix(c))
		}
		return item.Divert{Clients: cs, Servers: []netip.Prefix{netip.MustParsePrefix(servers)}, Ports: ports}
	}
	// The reply's clients hold, beside the client site, addresses that
	// are not unicast at this agent: its subnet's broadcast and the
	// all-hosts group (a remote "site" whose prefix covers them).
	spec := item.SteeringSpec{Interface: agent.ifname, ListenPort: 9876,
		Divert: []item.Divert{sel([]string{"10.9.1.0/24"}, "10.9.5.16/28"), sel([]string{"fd09::1:0/112"}, "fd09::5:0/112"),
			sel([]string{"10.9.1.0/24"}, "10.77.0.0/24")},
		Replies: []item.Divert{sel([]string{"10.9.1.0/24", "10.9.255.255/32", "224.0.0.0/4"}, "10.9.5.16/28"),
			sel([]string{"fd09::1:0/112", "ff02::/16"}, "fd09::5:0/112")},
	}
	applySpec(t, spec)

	aSock := r110Open(t, agent)
	cSock := r110Open(t, client)
	sSock := r110Open(t, server)
	mSock := r110Open(t, mhost)
	agentMAC, _ := net.ParseMAC(agent.mac)
	serverMAC, _ := net.ParseMAC(server.mac)
	clientMAC, _ := net.ParseMAC(client.mac)
	return &r110Net{agent: agent, client: client, server: server, mhost: mhost, spec: spec,
		aSock: aSock, cSock: cSock, sSock: sSock, mSock: mSock, agentMAC: agentMAC, serverMAC: serverMAC, clientMAC: clientMAC}
}

func (n *r110Net) reset() {
	for _, s := range []*r110Sock{n.aSock, n.cSock, n.sSock, n.mSock} {
		s.drain()
	}
}

func r110Settle() { time.Sleep(300 * time.Millisecond) }

// One packet the pass rules send on leaves with a TTL one less, and one
// whose TTL has run out is not sent on: nf_dup decrements the TTL in
// prerouting without checking it, so TTL 1 leaves as 0 and TTL 0 wraps to
// 255 (the agent revives an expired packet).
func TestPassRulesHonourTTL(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	n := r110Topology(t)
	client, server, aSock, cSock, sSock, agentMAC, serverMAC, settle, reset := n.client, n.server, n.aSock, n.cSock, n.sSock, n.agentMAC, n.serverMAC, r110Settle, n.reset
	// TTL: one passed packet in, how many out, with which TTL.
	for _, ttl := range []byte{64, 1, 0} {
		t.Run(fmt.Sprintf("unicast ttl %d", ttl), func(t *testing.T) {
			reset()
			seg := r110TCP(server.v4, client.v4, 50500, 22, 0x10, []byte("x"))
			sSock.send(t, r110IPv4(agentMAC, serverMAC, server.v4, client.v4, ttl, seg, 0, false))
			settle()
			out, _ := r110Count(aSock, server.v4, client.v4, true)
			in, _ := r110Count(cSock, server.v4, client.v4, false)
			var ttls []byte
			for _, p := range out {
				ttls = append(ttls, p.ttl)
			}
			t.Logf("TTL %d in: %d frames out of the agent (TTLs %v), %d at the client", ttl, len(out), ttls, len(in))
			if len(out) > 1 {
				t.Errorf("one packet in, %d out", len(out))
			}
			if ttl <= 1 && len(out) > 0 {
				t.Errorf("a packet that arrived with TTL %d was sent on (TTL %v); a router would have dropped it", ttl, ttls)
			}
			if ttl > 1 && (len(out) != 1 || out[0].ttl != ttl-1) {
				t.Errorf("TTL %d in: want one frame out with TTL %d, got TTLs %v", ttl, ttl-1, ttls)
			}
		})
	}

}

// A destination that is not unicast at the agent: the dup to a broadcast
// or multicast address is looped back into the agent's own prerouting
// hook, matches the same pass rule again and is dup'd again; with the TTL
// wrapping at 0 the loop never ends. The reply's clients here hold such
// addresses (the subnet's broadcast, the all-hosts group: a remote site
// whose prefix covers them). One packet in must give at most one out.
func TestPassRulesSendNoBroadcastOrMulticast(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	n := r110Topology(t)
	server, spec, aSock, cSock, sSock, agentMAC, serverMAC, reset := n.server, n.spec, n.aSock, n.cSock, n.sSock, n.agentMAC, n.serverMAC, n.reset
	// Destinations that are not unicast at the agent: a dup to them
	// loops back into the agent's own prerouting hook.
	for _, c := range []struct {
		name, fam string
		src, dst  netip.Addr
		ttl       byte
	}{
		{"IPv4 subnet broadcast ttl 4", "ip", server.v4, netip.MustParseAddr("10.9.255.255"), 4},
		{"IPv4 all-hosts multicast ttl 4", "ip", server.v4, netip.MustParseAddr("224.0.0.1"), 4},
		{"IPv6 all-nodes multicast hop limit 4", "ip6", server.v6, netip.MustParseAddr("ff02::1"), 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			reset()
			seg := r110TCP(c.src, c.dst, 50500, 22, 0x10, []byte("x"))
			if c.fam == "ip6" {
				sSock.send(t, r110IPv6(agentMAC, serverMAC, c.src, c.dst, c.ttl, seg, false))
			} else {
				sSock.send(t, r110IPv4(agentMAC, serverMAC, c.src, c.dst, c.ttl, seg, 0, false))
			}
			time.Sleep(time.Second)
			out, drops := r110Count(aSock, c.src, c.dst, true)
			atClient, _ := r110Count(cSock, c.src, c.dst, false)
			// Whatever is still looping stops with the table.
			exec.Command("nft", "delete", "table", c.fam, SteeringTable).Run()
			time.Sleep(300 * time.Millisecond)
			more, d2 := r110Count(aSock, c.src, c.dst, true)
			t.Logf("1 s after the packet the table was deleted; %d more frames had left by then (socket drops %d)", len(more), d2)
			applySpec(t, spec)
			t.Logf("%s: 1 frame in -> %d frames out of the agent (socket drops %d), %d at the client", c.name, len(out), drops, len(atClient))
			if len(out) > 1 {
				t.Errorf("one packet to %s in, %d frames out (amplification)", c.dst, len(out)+int(drops))
			}
		})
	}

}

// Crafted and real segments the divert and pass rules must tell apart.
func TestPassRulesOnCraftedSegments(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	n := r110Topology(t)
	client, server, aSock, cSock, sSock, mSock, agentMAC, serverMAC, clientMAC, settle, reset := n.client, n.server, n.aSock, n.cSock, n.sSock, n.mSock, n.agentMAC, n.serverMAC, n.clientMAC, r110Settle, n.reset
	// A transparent listener, as the relay has, for the diverts.
	startListener := func() []net.Listener {
		var lns []net.Listener
		for _, nw := range []string{"tcp4", "tcp6"} {
			addr := map[string]string{"tcp4": "0.0.0.0:9876", "tcp6": "[::]:9876"}[nw]
			ln := transparentListenerOn(t, nw, addr)
			lns = append(lns, ln)
			serveLines(t, ln, func(c net.Conn, line []byte) { fmt.Fprintf(c, "agent %s", line) })
		}
		return lns
	}
	lns := startListener()

	// Odd flag combinations from the client to the server's port: a
	// SYN with ECE|CWR (ECN setup) or PSH|URG is a first SYN and must be
	// diverted; SYN|FIN and SYN|RST are not, and are passed unchanged.
	for _, c := range []struct {
		name   string
		flags  byte
		divert bool
	}{
		{"SYN", 0x02, true},
		{"SYN|ECE|CWR", 0xc2, true},
		{"SYN|PSH|URG", 0x2a, true},
		{"SYN|FIN", 0x03, false},
		{"SYN|RST", 0x06, false},
		{"SYN|ACK", 0x12, false},
	} {
		for _, v6 := range []bool{false, true} {
			fam := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
			t.Run(fam+" "+c.name, func(t *testing.T) {
				reset()
				src, dst := client.v4, server.v4
				if v6 {
					src, dst = client.v6, server.v6
				}
				sport := uint16(40000 + int(c.flags))
				seg := r110TCP(src, dst, sport, 50500, c.flags, nil)
				if v6 {
					cSock.send(t, r110IPv6(agentMAC, clientMAC, src, dst, 64, seg, false))
				} else {
					cSock.send(t, r110IPv4(agentMAC, clientMAC, src, dst, 64, seg, 0, false))
				}
				settle()
				atServer, _ := r110Count(sSock, src, dst, false)
				// The listener's SYN-ACK (from the server's address)
				// reaches the client when the SYN was diverted.
				synack := 0
				back, _ := r110Count(cSock, dst, src, false)
				for _, p := range back {
					if p.hasTCP && p.flags&0x12 == 0x12 && p.dport == sport {
						synack++
					}
				}
				t.Logf("%s %s: %d at the server, %d SYN-ACKs back from the agent", fam, c.name, len(atServer), synack)
				if c.divert && (len(atServer) != 0 || synack == 0) {
					t.Errorf("%s %s: want it diverted (none at the server, a SYN-ACK from the listener), got %d at the server, %d SYN-ACKs", fam, c.name, len(atServer), synack)
				}
				if !c.divert && (len(atServer) != 1 || atServer[0].flags != c.flags) {
					t.Errorf("%s %s: want it passed unchanged, once; got %d at the server", fam, c.name, len(atServer))
				}
			})
		}
	}

	// IPv6 extension headers: a SYN behind a destination options header
	// is still a connection's first SYN.
	t.Run("IPv6 SYN behind destination options", func(t *testing.T) {
		reset()
		seg := r110TCP(client.v6, server.v6, 41000, 50500, 0x02, nil)
		cSock.send(t, r110IPv6(agentMAC, clientMAC, client.v6, server.v6, 64, seg, true))
		settle()
		atServer, _ := r110Count(sSock, client.v6, server.v6, false)
		back, _ := r110Count(cSock, server.v6, client.v6, false)
		t.Logf("%d at the server, %d frames back", len(atServer), len(back))
		if len(atServer) != 0 || len(back) == 0 {
			t.Errorf("SYN behind a destination options header: %d at the server, %d answers; want it diverted", len(atServer), len(back))
		}
	})

	// IPv4 fragments of a passed segment: all of the payload gets on.
	t.Run("IPv4 fragments passed whole", func(t *testing.T) {
		reset()
		seg := r110TCP(server.v4, client.v4, 50500, 22, 0x18, []byte(strings.Repeat("f", 1000)))
		sSock.send(t, r110IPv4(agentMAC, serverMAC, server.v4, client.v4, 64, seg[:512], 0, true))
		sSock.send(t, r110IPv4(agentMAC, serverMAC, server.v4, client.v4, 64, seg[512:], 512, false))
		settle()
		in, _ := r110Count(cSock, server.v4, client.v4, false)
		bytes := 0
		for _, p := range in {
			bytes += p.payloadBytes
		}
		t.Logf("2 fragments (%d bytes of TCP) in: %d frames, %d bytes at the client", len(seg), len(in), bytes)
		if bytes != len(seg) {
			t.Errorf("fragments of a passed segment: %d of %d bytes reached the client", bytes, len(seg))
		}
	})

	// A LAN host cannot use the pass rules to reach the agent's other
	// network: a packet for a management host is sent on only out of the
	// interface it came in by.
	t.Run("no way to the agent's other network", func(t *testing.T) {
		reset()
		dst := netip.MustParseAddr("10.77.0.5")
		seg := r110TCP(client.v4, dst, 42000, 50500, 0x10, []byte("x"))
		cSock.send(t, r110IPv4(agentMAC, clientMAC, client.v4, dst, 64, seg, 0, false))
		settle()
		atMgmt, _ := r110Count(mSock, client.v4, dst, false)
		out, _ := r110Count(aSock, client.v4, dst, true)
		t.Logf("%d frames at the management host, %d out of the agent's LAN interface", len(atMgmt), len(out))
		if len(atMgmt) != 0 {
			t.Errorf("a LAN host's packet reached the agent's management network (%d frames)", len(atMgmt))
		}
	})

	// ECN: a client with tcp_ecn=1 sends SYN|ECE|CWR; its connection
	// must still reach the listener (IPv4 and IPv6).
	if err := client.inNs(func() error { return os.WriteFile("/proc/sys/net/ipv4/tcp_ecn", []byte("1"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	echo := func(h passOnHost, network, addr string) {
		serveLines(t, listenIn(t, h, network, addr), func(c net.Conn, line []byte) { fmt.Fprintf(c, "server %s", line) })
	}
	echo(server, "tcp4", netip.AddrPortFrom(server.v4, 50500).String())
	echo(server, "tcp6", netip.AddrPortFrom(server.v6, 50500).String())
	dial := func(from netip.Addr, to netip.AddrPort) (string, error) {
		var got string
		err := client.inNs(func() error {
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
			c, err := d.Dial("tcp", to.String())
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			io.WriteString(c, "hi")
			b, err := io.ReadAll(c)
			got = string(b)
			return err
		})
		return got, err
	}
	for _, c := range []struct{ from, to netip.Addr }{{client.v4, server.v4}, {client.v6, server.v6}} {
		t.Run("ECN client "+c.to.String(), func(t *testing.T) {
			reset()
			got, err := dial(c.from, netip.AddrPortFrom(c.to, 50500))
			back, _ := r110Count(cSock, c.from, c.to, true)
			ecnSYN := 0
			for _, p := range back {
				if p.flags == 0xc2 {
					ecnSYN++
				}
			}
			t.Logf("ECN SYNs sent: %d; answer %q, %v", ecnSYN, got, err)
			if ecnSYN == 0 {
				t.Fatalf("the client sent no SYN with ECE|CWR; tcp_ecn did not take")
			}
			if got != "agent hi" {
				t.Errorf("an ECN-capable client's connection: answer %q (%v), want the transparent listener's \"agent hi\"", got, err)
			}
		})
	}

	// Without the listener: what becomes of a whitelisted connection.
	for _, ln := range lns {
		ln.Close()
	}
	time.Sleep(100 * time.Millisecond)
	for _, c := range []struct{ from, to netip.Addr }{{client.v4, server.v4}, {client.v6, server.v6}} {
		t.Run("listener absent "+c.to.String(), func(t *testing.T) {
			got, err := dial(c.from, netip.AddrPortFrom(c.to, 50500))
			t.Logf("whitelisted connection with no transparent listener: answer %q, %v", got, err)
			if got != "server hi" {
				t.Errorf("with the listener gone the connection neither went direct nor was refused cleanly: %q, %v", got, err)
			}
		})
	}
}
