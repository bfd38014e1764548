package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/connlimit"
	"github.com/sosappliance/sosappliance/internal/netnstest"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// ipv6Responder starts a server-side agent with lim in a namespace of its
// own where every address of 2001:db8::/32 is local and may be bound
// without being configured, so a test can connect from any of them. dial
// connects from each src, in the namespace, and keeps the connections
// open until the test ends.
func ipv6Responder(t *testing.T, lim Limits) (b *Agent, dial func(srcs ...netip.Addr) []net.Conn) {
	t.Helper()
	ns := netnstest.AnyIPv6(t, "sosr6f")
	err := tuning.RunInNamedNetns(ns, func() error {
		var err error
		b, err = New(Config{
			Name: "agent-b", DataListen: netip.MustParseAddrPort("[2001:db8:ff::1]:0"), PSK: testPSK,
			Server: []Whitelist{{Name: "w", Clients: []netip.Prefix{netip.MustParsePrefix("2001:db8:a::/64")},
				Server: netip.MustParseAddr("2001:db8:b::1"), Port: 80, Streams: 2, ChunkSize: 1000, PeerName: "agent-a"}},
			Limits: lim,
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
	data := b.Addrs().Data.String()
	return b, func(srcs ...netip.Addr) []net.Conn {
		t.Helper()
		return netnstest.Dial(t, ns, data, srcs...)
	}
}

// settledPreAuth waits until every one of n connections is held or was
// evicted, and returns how many are held and evicted.
func settledPreAuth(t *testing.T, b *Agent, n int) (held int, evicted uint64) {
	t.Helper()
	testsupport.Eventually(t, 20*time.Second, "every connection held or evicted", func() bool {
		st := b.Stats().Totals
		return st.PreAuthActive+int(st.Rejected[rejectPreAuthEvicted]) == n
	})
	st := b.Stats().Totals
	return st.PreAuthActive, st.Rejected[rejectPreAuthEvicted]
}

// TestPreAuthFloodFromOneIPv6Prefix: one host holds a whole IPv6 /64 and
// opens each connection from another of its addresses. The per-address
// cap does not bound it, but the /64 holds at most half of the
// agent-wide cap (connlimit.PerNetwork), evicting its own oldest beyond
// that, so the handshakes of other sources that were waiting stay.
// Counted per address only, the flood would pass the agent-wide cap and
// evict them as the oldest.
func TestPreAuthFloodFromOneIPv6Prefix(t *testing.T) {
	const preauthCap, perSource = 32, 8
	perNet := connlimit.PerNetwork(perSource, preauthCap)
	b, dial := ipv6Responder(t, Limits{MaxPreAuth: preauthCap, MaxPreAuthPerSource: perSource, PreAuthTimeout: time.Minute})
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
	held, evicted := settledPreAuth(t, b, len(waiting)+len(flood))
	t.Logf("held %d unauthenticated connections, evicted %d", held, evicted)
	if held != len(waiting)+perNet {
		t.Errorf("%d unauthenticated connections held; want %d: the /64's %d and the others' %d",
			held, len(waiting)+perNet, perNet, len(waiting))
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

// TestPeersOfOneIPv6SubnetKeepTheirHandshakes: three client-side agents
// on one IPv6 LAN (one /64, each its own address) open streams toward the
// same server-side agent at once, each with HandshakesInFlight in flight,
// fewer than the default per-source cap, as the initiator promises: none
// is evicted, though together they pass that cap. (Found by review: with
// the /64 as the only source, their 192 handshakes shared one cap of 128
// and evicted each other.)
func TestPeersOfOneIPv6SubnetKeepTheirHandshakes(t *testing.T) {
	b, dial := ipv6Responder(t, Limits{MaxPreAuth: 1024, MaxPreAuthPerSource: 128, PreAuthTimeout: time.Minute})
	peers := []netip.Addr{netip.MustParseAddr("2001:db8:a::1"), netip.MustParseAddr("2001:db8:a::2"), netip.MustParseAddr("2001:db8:a::3")}
	for _, src := range peers {
		srcs := make([]netip.Addr, HandshakesInFlight)
		for i := range srcs {
			srcs[i] = src
		}
		dial(srcs...)
	}
	held, evicted := settledPreAuth(t, b, len(peers)*HandshakesInFlight)
	t.Logf("%d agents x %d handshakes in flight: held %d, evicted %d", len(peers), HandshakesInFlight, held, evicted)
	if evicted > 0 {
		t.Errorf("%d in-flight handshakes of peer agents evicted, though each stayed under the per-source cap", evicted)
	}
}
