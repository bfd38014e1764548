package sdn_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/connlimit"
	"github.com/sosappliance/sosappliance/internal/netnstest"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestHandshakeCapPerIPv6Prefix: one host holding an IPv6 /64 opens
// each connection to the controller from another of its addresses and
// never finishes a handshake. A /64 holds at most half of the
// controller-wide handshake cap (connlimit.PerNetwork): beyond it each
// new connection of the /64 takes the place of the /64's oldest, so a
// switch from elsewhere still gets a handshake (the controller's HELLO);
// counted per address only, the flood would take every place and each of
// its connections would evict the oldest handshake of all.
func TestHandshakeCapPerIPv6Prefix(t *testing.T) {
	const total, perSource = 16, 4
	ctl, ns, addr := ipv6Controller(t, "sossdn6f", total, perSource)
	dial := func(src netip.Addr) net.Conn {
		t.Helper()
		return netnstest.Dial(t, ns, addr, src)[0]
	}
	const flood = 100
	for i := range flood {
		dial(netip.MustParseAddr(fmt.Sprintf("2001:db8:66::%x", 0x100+i)))
	}
	perNet := connlimit.PerNetwork(perSource, total)
	testsupport.Eventually(t, 20*time.Second, "the flood's excess evicted within its /64", func() bool {
		return ctl.Status().Counters.HandshakeEvictions >= uint64(flood-perNet)
	})
	if st := ctl.Status().Counters; st.HandshakeEvictions != uint64(flood-perNet) || st.HandshakeOverflows != 0 {
		t.Errorf("of %d connections from one /64, %d evicted and %d closed on accept; want %d evicted (its oldest, one address each) and none closed",
			flood, st.HandshakeEvictions, st.HandshakeOverflows, flood-perNet)
	}
	// A switch from another /64 still gets its handshake: the
	// controller answers its HELLO with its own, rather than close.
	sw := dial(netip.MustParseAddr("2001:db8:10::1"))
	_ = sw.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := sw.Write([]byte{0x04, 0, 0, 8, 0, 0, 0, 1}); err != nil { // HELLO, xid 1
		t.Fatal(err)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(sw, hdr[:]); err != nil {
		t.Fatalf("a connection from another source got no HELLO: %v", err)
	}
	if hdr[0] != 0x04 || hdr[1] != 0 {
		t.Errorf("a connection from another source read %x, want an OpenFlow 1.3 HELLO", hdr)
	}
}
