package relay

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// TestFarAgentAtItsLimitsStaysInTheSpread: a far agent that is alive and
// healthy but refuses one session for its limits (here max_sessions = 1,
// already held; sessions_per_peer or memory would do the same) stays in
// the client-side agent's spread: the controller's health checks find it
// up, so the server site's switch goes on steering its buckets' replies
// to it, and a connection dialed to another far agent would have its
// server's SYN-ACK sent to an agent without its socket. (Before, any
// failure to open a session's first stream left the far agent out for
// farDownFor, 10 s: review, helper-107, who wrote this test.)
func TestFarAgentAtItsLimitsStaysInTheSpread(t *testing.T) {
	a, far, route := spreadOverTwo(t, [2]Limits{{}, {MaxSessions: 1}})
	at := a.Addrs().Transparent

	// Ports with bit 1 set are in odd buckets: b2's.
	dialB2 := func(from int) *net.TCPConn {
		for port := from; port < from+8000; port += 4 {
			if c, err := net.DialTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port + 2}, net.TCPAddrFromAddrPort(at)); err == nil {
				return c
			}
		}
		t.Fatal("no free client port in b2's buckets")
		return nil
	}
	first := dialB2(41000)
	defer first.Close()
	if _, err := first.Write([]byte("hold")); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "a session on b2", func() bool { return far[1].Stats().Totals.SessionsStarted == 1 })
	second := dialB2(50000)
	defer second.Close()
	_, _ = second.Write([]byte("x"))
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	_, _ = second.Read(buf) // carried direct, or refused: either way it is answered
	up := a.far.up(route.Peers, time.Now())
	probe := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 43002) // bucket 5: b2's
	dialed, _ := farAgent(route, probe, up)
	ctl, _ := spread.Assign(spread.ModePort, 4, 2, nil) // the controller: b2 answers its health checks
	switchAgent := route.Peers[ctl.Agent(probe)].Name
	t.Logf("after b2 refused one session (max_sessions): far health up=%v; a connection from %s dials %s, the switch steers its replies to %s", up, probe, dialed, switchAgent)
	if dialed != switchAgent {
		t.Errorf("the client-side agent dials %s for a connection whose replies the server site's switch steers to %s (b2 is healthy: it only refused a session)", dialed, switchAgent)
	}
}
