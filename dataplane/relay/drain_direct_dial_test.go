package relay

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// silentServer listens on loopback with an accept queue of one, filled at
// once and never accepted: the kernel drops every later SYN, so a dial to
// it waits for its timeout, as to a server behind a path that died.
func silentServer(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4(sa.(*syscall.SockaddrInet4).Addr), uint16(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.DialTimeout("tcp4", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatalf("fill the accept queue: %v", err)
	}
	t.Cleanup(func() { _ = filler.Close() })
	// The mount: a dial now goes unanswered.
	if c, err := net.DialTimeout("tcp4", addr.String(), 300*time.Millisecond); err == nil {
		_ = c.Close()
		t.Fatal("a dial to the silent server was answered: the test cannot mount its case")
	}
	return addr
}

// TestDrainDeadlineCancelsADirectDial: a connection carried direct whose
// server does not answer is still dialing when the drain's deadline
// passes. The deadline resets the client, and Shutdown returns then, not
// when the dial's own timeout (pre_auth_timeout) runs out. Found by
// review: the dial was not cancelled and held Shutdown up to
// pre_auth_timeout past its deadline.
func TestDrainDeadlineCancelsADirectDial(t *testing.T) {
	server := silentServer(t)
	gone, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	peer := gone.Addr().(*net.TCPAddr).AddrPort()
	_ = gone.Close() // the far agent: refused, so the connection goes direct
	const dialTimeout = 10 * time.Minute
	a := startAgent(t, Config{
		Name:              "agent-a",
		TransparentListen: netip.MustParseAddrPort("127.0.0.1:0"),
		PSK:               testPSK,
		Client: []Whitelist{{
			Name: "test", Clients: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			Server: server.Addr(), Port: server.Port(), Streams: 2, ChunkSize: 60000, QueueLength: 5,
			Peer: peer, PeerName: "agent-b",
		}},
		Limits: Limits{PreAuthTimeout: dialTimeout},
	}, server)
	c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(a.Addrs().Transparent))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	testsupport.Eventually(t, 10*time.Second, "the connection dialing its server direct", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, far := range a.direct {
			if far == nil {
				return true
			}
		}
		return false
	})
	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		shutdown <- a.Shutdown(ctx)
	}()
	select {
	case serr := <-shutdown:
		t.Logf("drain: %v", serr)
		if serr == nil || !strings.Contains(serr.Error(), "aborted 1 sessions") {
			t.Errorf("Shutdown said %v, want the direct connection counted as aborted", serr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Shutdown still waiting 20 s after its 200 ms drain: the direct connection's dial (timeout %s) held it", dialTimeout)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the client read data from a connection the drain's deadline cut")
	}
}
