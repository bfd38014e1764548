package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// TestPreAuthFloodFromOneIPv6Prefix: one host holds a whole IPv6 /64 and
// can open each connection from an address of its own. The data port's
// per-source cap counts a /64 as one source, as the health and metrics
// ports do, so a flood of idle connections from one /64, each from
// another address, evicts only its own: the handshakes of other sources
// that were waiting stay. Counted per address, the flood would pass the
// agent-wide cap and evict them as the oldest.
func TestPreAuthFloodFromOneIPv6Prefix(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "sysctl")
	ns := fmt.Sprintf("sosr6f%d", os.Getpid())
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	// Every address of 2001:db8::/32 is this namespace's own, and may be
	// bound without being configured.
	sh(t, "ip", "-n", ns, "-6", "route", "add", "local", "2001:db8::/32", "dev", "lo")
	sh(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1")

	const preauthCap, perSource = 32, 8
	var b *Agent
	err := tuning.RunInNamedNetns(ns, func() error {
		var err error
		b, err = New(Config{
			Name: "agent-b", DataListen: netip.MustParseAddrPort("[2001:db8:ff::1]:0"), PSK: testPSK,
			Server: []Whitelist{{Name: "w", Clients: []netip.Prefix{netip.MustParsePrefix("2001:db8:a::/64")},
				Server: netip.MustParseAddr("2001:db8:b::1"), Port: 80, Streams: 2, ChunkSize: 1000, PeerName: "agent-a"}},
			Limits: Limits{MaxPreAuth: preauthCap, MaxPreAuthPerSource: perSource, PreAuthTimeout: time.Minute},
		}, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		return b.Start(context.Background())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	data := b.Addrs().Data
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	dial := func(srcs ...netip.Addr) []net.Conn {
		var out []net.Conn
		err := tuning.RunInNamedNetns(ns, func() error {
			for _, src := range srcs {
				d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
				c, err := d.Dial("tcp6", data.String())
				if err != nil {
					return fmt.Errorf("dial from %s: %w", src, err)
				}
				out = append(out, c)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, out...)
		return out
	}
	// Waiting handshakes of four other sources, each its own /64.
	var others []netip.Addr
	for i := range 4 {
		others = append(others, netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::1", 0x10+i)))
	}
	waiting := dial(others...)
	testsupport.Eventually(t, 10*time.Second, "the waiting handshakes held", func() bool {
		return b.Stats().Totals.PreAuthActive == len(waiting)
	})
	// The flood: 200 connections from 200 addresses of one /64.
	var flood []netip.Addr
	for i := range 200 {
		flood = append(flood, netip.MustParseAddr(fmt.Sprintf("2001:db8:66::%x", 0x100+i)))
	}
	dial(flood...)
	testsupport.Eventually(t, 20*time.Second, "every connection held or evicted", func() bool {
		st := b.Stats().Totals
		return st.PreAuthActive+int(st.Rejected[rejectPreAuthEvicted]) == len(waiting)+len(flood)
	})
	st := b.Stats().Totals
	t.Logf("held %d unauthenticated connections, evicted %d", st.PreAuthActive, st.Rejected[rejectPreAuthEvicted])
	if st.PreAuthActive > len(waiting)+perSource {
		t.Errorf("%d unauthenticated connections held; want at most %d: the /64's %d and the others' %d",
			st.PreAuthActive, len(waiting)+perSource, perSource, len(waiting))
	}
	// The waiting handshakes are still open: a read waits (the agent
	// waits for their hello) rather than ending.
	for i, c := range waiting {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var one [1]byte
		_, err := c.Read(one[:])
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("the waiting connection from %s was ended by the flood: %v", others[i], err)
		}
	}
}
