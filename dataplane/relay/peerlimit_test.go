package relay

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSessionsPerPeerBounded: a server-side agent serves two client-side
// agents. One of them holds open as many sessions as it can; it gets
// Limits.MaxSessionsPerPeer of them (the rest are refused with the
// authenticated session limit and carried direct, whole), and the other
// agent's connection is still accelerated although the agent-wide
// max_sessions would have let the first take every session.
func TestSessionsPerPeerBounded(t *testing.T) {
	const perPeer = 2
	p := startPair(t, pairOptions{streams: 2, chunk: 16384,
		limitsB: Limits{MaxSessions: 16, MaxSessionsPerPeer: perPeer},
		serverWhitelist: func(e Whitelist) []Whitelist {
			a, c := e, e
			a.Clients = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			c.Name, c.Clients, c.PeerName = "other-site", []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, "agent-c"
			return []Whitelist{a, c}
		}}, echo)
	entry := p.wlB[0]
	entry.Clients = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	entry.Peer, entry.PeerName = p.b.Addrs().Data, "agent-b"
	c := startAgent(t, Config{Name: "agent-c", TransparentListen: netip.MustParseAddrPort("127.0.0.1:0"), PSK: testPSK,
		Client: []Whitelist{entry}}, p.server.addr)

	// open dials entry from src and checks the echo; the connection stays
	// open, holding its session.
	open := func(entry netip.AddrPort, src string, msg string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		conn, err := d.Dial("tcp4", entry.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
			t.Fatalf("echo through %s from %s: %q, %v", entry, src, got, err)
		}
		return conn
	}
	var busy []net.Conn
	for i := range perPeer + 2 {
		busy = append(busy, open(p.entry, "127.0.0.1", "busy site "+string(rune('0'+i))))
	}
	ta := p.a.Stats().Totals
	t.Logf("busy site: %d sessions accelerated, %d carried direct", ta.SessionsActive, ta.Fallbacks)
	if ta.SessionsActive != perPeer || ta.Fallbacks != 2 {
		t.Errorf("the busy site holds %d sessions and %d direct connections; want %d and 2", ta.SessionsActive, ta.Fallbacks, perPeer)
	}
	open(c.Addrs().Transparent, "127.0.0.2", "other site")
	tc := c.Stats().Totals
	if tc.SessionsActive != 1 || tc.Fallbacks != 0 {
		t.Errorf("the other site: %d sessions, %d direct; want its connection accelerated", tc.SessionsActive, tc.Fallbacks)
	}
	testsupport.Eventually(t, 10*time.Second, "the server side holding both sites' sessions", func() bool {
		return p.b.Stats().Totals.SessionsActive == perPeer+1
	})
	if n := p.b.Stats().Totals.Rejected[rejectSessionLimit]; n == 0 {
		t.Error("no refusal counted for the session limit")
	}

	// The busy site's sessions end: its place is given back, and its
	// next connection is accelerated again.
	for _, conn := range busy {
		conn.Close()
	}
	testsupport.Eventually(t, 30*time.Second, "the busy site's sessions gone at the server side", func() bool {
		return p.b.Stats().Totals.SessionsActive == 1
	})
	open(p.entry, "127.0.0.1", "busy site again")
	if ta := p.a.Stats().Totals; ta.Fallbacks != 2 {
		t.Errorf("after its sessions ended, the busy site's next connection was carried direct (%d fallbacks)", ta.Fallbacks)
	}
}
