package sockowner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func addrPort(a net.Addr) netip.AddrPort { return a.(*net.TCPAddr).AddrPort() }

func newProber(t *testing.T) *Prober {
	t.Helper()
	p, err := New()
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// loopbackListener listens on 127.0.0.1 until the test ends, and says
// on which port.
func loopbackListener(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// accept dials ln from this process and returns the accepted end.
func acceptOwn(t *testing.T, ln net.Listener, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func requireOwner(t *testing.T, p *Prober, s net.Conn, want uint32) {
	t.Helper()
	uid, found, err := p.PeerOwner(addrPort(s.LocalAddr()), addrPort(s.RemoteAddr()))
	if err != nil || !found || uid != want {
		t.Fatalf("peer of %s -> %s: uid %d, found %v, %v; want uid %d found", s.RemoteAddr(), s.LocalAddr(), uid, found, err, want)
	}
}

// TestPeerOwnerOfThisProcess: a connection this process (root) made over
// IPv4 and IPv6 loopback, and to a dual-stack listener over IPv4 (the
// accepted end sees mapped addresses), is found as root's.
func TestPeerOwnerOfThisProcess(t *testing.T) {
	p := newProber(t)
	for _, c := range []struct{ listen, dial string }{
		{"127.0.0.1:0", "127.0.0.1"},
		{"[::1]:0", "::1"},
		{"[::]:0", "127.0.0.1"},
	} {
		ln, err := net.Listen("tcp", c.listen)
		testsupport.RequireNoError(t, err)
		defer ln.Close()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		requireOwner(t, p, acceptOwn(t, ln, net.JoinHostPort(c.dial, port)), uint32(unix.Getuid()))
	}
}

// TestPeerOwnerOfAnotherUser: a connection another user's process made is
// found as that user's, among many of root's.
func TestPeerOwnerOfAnotherUser(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "python3")
	p := newProber(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	for range 20 {
		acceptOwn(t, ln, ln.Addr().String())
	}
	s := acceptFromOtherUser(t, ln, nil,
		"import socket,sys; s=socket.create_connection(('127.0.0.1', "+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)+")); print('up', flush=True); sys.stdin.read()", "up")
	requireOwner(t, p, s, testsupport.OtherUID)
}

// TestPeerNotOnThisNode: a tuple no socket has, and a connection from
// another network namespace (a veth pair to a namespace of one thread:
// another host, as far as the kernel's sockets go), are not found.
func TestPeerNotOnThisNode(t *testing.T) {
	if !testsupport.InFreshNetns(t) {
		return
	}
	p := newProber(t)
	_, found, err := p.PeerOwner(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("192.0.2.1:2"))
	if err != nil || found {
		t.Fatalf("a tuple no socket has, from an address not this node's: found %v, %v", found, err)
	}
	// From an address of this node a peer not found is not "remote":
	// its socket is here, bound to a device or gone.
	_, found, err = p.PeerOwner(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2"))
	if !errors.Is(err, ErrLocalPeerNotFound) || found {
		t.Fatalf("a tuple no socket has, from loopback: found %v, %v; want ErrLocalPeerNotFound", found, err)
	}

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "so0"}, PeerName: "so1"}
	testsupport.RequireNoError(t, netlink.LinkAdd(veth))
	testsupport.RequireNoError(t, netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.9.0.1").To4(), Mask: net.CIDRMask(24, 32)}}))
	testsupport.RequireNoError(t, netlink.LinkSetUp(veth))
	ln, err := net.Listen("tcp", "10.9.0.1:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()

	// The client: a thread of its own in a namespace of its own, which
	// holds the veth's other end. The thread stays locked, so it ends
	// with the goroutine and its namespace with it.
	type dialed struct {
		c   net.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		c, err := func() (net.Conn, error) {
			parent, err := netns.Get()
			if err != nil {
				return nil, err
			}
			defer parent.Close()
			own, err := netns.New()
			if err != nil {
				return nil, err
			}
			defer own.Close()
			there, err := netlink.NewHandleAt(parent)
			if err != nil {
				return nil, err
			}
			defer there.Close()
			link, err := there.LinkByName("so1")
			if err != nil {
				return nil, err
			}
			if err := there.LinkSetNsFd(link, int(own)); err != nil {
				return nil, err
			}
			if link, err = netlink.LinkByName("so1"); err != nil {
				return nil, err
			}
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.9.0.2").To4(), Mask: net.CIDRMask(24, 32)}}); err != nil {
				return nil, err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return nil, err
			}
			return net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		}()
		done <- dialed{c, err}
	}()
	d := <-done
	testsupport.RequireNoError(t, d.err)
	defer d.c.Close()
	s, err := ln.Accept()
	testsupport.RequireNoError(t, err)
	defer s.Close()
	uid, found, err := p.PeerOwner(addrPort(s.LocalAddr()), addrPort(s.RemoteAddr()))
	if err != nil || found {
		t.Fatalf("a peer in another namespace (%s): uid %d, found %v, %v; want not found", s.RemoteAddr(), uid, found, err)
	}
}

func TestMain(m *testing.M) { testsupport.Main(m, nil) }

// TestPortFilterGolden: the kernel's filter of sockets connected to one
// of three ports, byte by byte (the kernel checks it too, in every test
// that lists).
func TestPortFilterGolden(t *testing.T) {
	got := portFilter([]uint16{80, 443, 0x1234})
	ne := binary.NativeEndian
	want := make([]byte, 32)
	op := func(at int, code, yes byte, no uint16) {
		want[at], want[at+1] = code, yes
		ne.PutUint16(want[at+2:], no)
	}
	op(0, bcDstEq, 8, 12)
	op(4, 0, 0, 80)
	op(8, bcJmp, 4, 24) // to the end: a match
	op(12, bcDstEq, 8, 12)
	op(16, 0, 0, 443)
	op(20, bcJmp, 4, 12)
	op(24, bcDstEq, 8, 12) // past the end: no match
	op(28, 0, 0, 0x1234)
	if !bytes.Equal(got, want) {
		t.Errorf("portFilter:\n got %x\nwant %x", got, want)
	}
}

// TestBudgetReserves: a burst of ListingsPerSecond at once, then one
// turn every 1/ListingsPerSecond; a turn further off than the limit is
// refused and takes nothing.
func TestBudgetReserves(t *testing.T) {
	var b budget
	now := time.Unix(1000, 0)
	for i := range ListingsPerSecond {
		if wait, ok := b.reserve(now, time.Second); !ok || wait != 0 {
			t.Fatalf("burst %d: wait %v, %v", i, wait, ok)
		}
	}
	step := time.Second / ListingsPerSecond
	if got := b.until(now); (got - step).Abs() > time.Millisecond {
		t.Fatalf("after the burst, the next turn in %v, want %v", got, step)
	}
	for i := 1; i <= ListingsPerSecond; i++ {
		if got := b.until(now); (got - time.Duration(i)*step).Abs() > time.Millisecond {
			t.Fatalf("turn %d after the burst: until says %v, want %v", i, got, time.Duration(i)*step)
		}
		wait, ok := b.reserve(now, time.Second)
		if !ok || (wait-time.Duration(i)*step).Abs() > time.Millisecond {
			t.Fatalf("turn %d after the burst: wait %v, %v; want %v", i, wait, ok, time.Duration(i)*step)
		}
	}
	if wait, ok := b.reserve(now, time.Second); ok {
		t.Fatalf("a turn past the limit: wait %v, granted", wait)
	}
	later := now.Add(time.Second + step)
	if wait, ok := b.reserve(later, time.Second); !ok || wait != 0 {
		t.Fatalf("a second later, after the turns reserved: wait %v, %v; want 0", wait, ok)
	}
}
