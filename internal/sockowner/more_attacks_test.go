package sockowner

// Written by review (helper-100) of a2720f1: the listing path's
// established check, its budget, its family, the multi-datagram dump, the
// descriptors, and broadcast sources.

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// dialBound dials addr from this process with the socket bound to dev
// (and to from, when valid).
func dialBound(t *testing.T, dev string, from netip.AddrPort, addr string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, dev) })
		if err != nil {
			return err
		}
		return serr
	}}
	if from.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(from)
	}
	c, err := d.Dial("tcp", addr)
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func acceptTCP(t *testing.T, ln net.Listener) *net.TCPConn {
	t.Helper()
	s, err := ln.Accept()
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s.(*net.TCPConn)
}

// TestHalfClosedBoundRootPeerIsRoot: a root client bound to a
// device (or over link-local) that sends its request and half-closes
// (shutdown(SHUT_WR), as HTTP/1.0-style clients and `nc -N` do) is still
// there, in FIN_WAIT2, and still root's; our end is in CLOSE_WAIT. The
// established check refuses it as ErrPeerGone. FAILS on a2720f1.
func TestHalfClosedBoundRootPeerIsRoot(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	testsupport.Commands(t, []string{"ip", "link", "set", "lo", "up"})
	p := newProber(t)
	ln, _ := loopbackListener(t)
	c := dialBound(t, "lo", netip.AddrPort{}, ln.Addr().String())
	s := acceptTCP(t, ln)
	_, err := c.Write([]byte("GET /metrics HTTP/1.0\r\n\r\n"))
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, c.CloseWrite())
	// Read the request to its end: the FIN has arrived, our end is CLOSE_WAIT.
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	for i := 0; i < 100; i++ {
		if _, err := s.Read(buf); err != nil {
			break
		}
	}
	uid, found, err := p.PeerOwnerOf(s)
	if err != nil || !found || uid != 0 {
		t.Errorf("root's half-closed client bound to lo, %s -> %s: uid %d, found %v, %v; want uid 0 found (the client is alive and waits for the answer)",
			s.RemoteAddr(), s.LocalAddr(), uid, found, err)
	}
}

// TestBoundRootPeerNotDeniedByOtherUser: the listing budget is
// one for the node. Another user's connections bound to lo (any user may
// bind one; each is refused, yet each needs a listing) drained it, and
// root's own device-bound connection was then refused as ErrBusy: a local
// user denied root's (and AllowUsers') device-bound and link-local
// clients for as long as it kept up 20 connections a second (a known
// limit until one listing answered them all). Now the 300 connections and
// root's, finished together, are each found as their own user's with
// one listing per address family; and lookups one at a time past the
// budget's burst wait for their turn instead of failing.
func TestBoundRootPeerNotDeniedByOtherUser(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip") {
		return
	}
	testsupport.Commands(t, []string{"ip", "link", "set", "lo", "up"})
	p := newProber(t)
	ln, port := loopbackListener(t)
	const n = 300
	line := otherUserClient(t, nil, `
import socket, sys
ss = []
for i in range(`+strconv.Itoa(n)+`):
    s = socket.socket()
    s.settimeout(10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
    s.connect(("127.0.0.1", `+port+`))
    ss.append(s)
print("up", flush=True)
sys.stdin.read()
`)
	if line != "up" {
		t.Fatalf("the other user's client: %q", line)
	}
	var others []*net.TCPConn
	for range n {
		others = append(others, acceptTCP(t, ln))
	}
	// One at a time past the burst: each waits for its turn.
	for i, s := range others[:ListingsPerSecond+5] {
		uid, found, err := p.PeerOwnerOf(s)
		if err != nil || !found || uid != testsupport.OtherUID {
			t.Fatalf("the other user's bound connection %d alone: uid %d, found %v, %v; want uid %d found", i, uid, found, err, testsupport.OtherUID)
		}
	}
	dialBound(t, "lo", netip.AddrPort{}, ln.Addr().String())
	root := acceptTCP(t, ln)
	var lookups []*Lookup
	for _, s := range append(others, root) {
		l := p.Begin(s)
		if l.Done() {
			t.Fatalf("%s -> %s was answered without a listing: uid %d, found %v, %v", s.RemoteAddr(), s.LocalAddr(), l.UID, l.Found, l.Err)
		}
		lookups = append(lookups, l)
	}
	before := p.listings.Load()
	p.Finish(lookups)
	if got := p.listings.Load() - before; got != 2 {
		t.Errorf("%d listings for %d connections, want one per address family", got, len(lookups))
	}
	for i, l := range lookups[:n] {
		if l.Err != nil || !l.Found || l.UID != testsupport.OtherUID {
			t.Errorf("the other user's bound connection %d: uid %d, found %v, %v; want uid %d found", i, l.UID, l.Found, l.Err, testsupport.OtherUID)
		}
	}
	if l := lookups[n]; l.Err != nil || !l.Found || l.UID != 0 {
		t.Errorf("root's client bound to lo beside uid %d's %d: uid %d, found %v, %v; want uid 0 found", testsupport.OtherUID, n, l.UID, l.Found, l.Err)
	}
}

// TestMappedBoundRootPeerOfIPv4Listener: an IPv6 socket (a
// dual-stack client) bound to lo connects to ::ffff:127.0.0.1; an IPv4
// listener sees 127.0.0.1 on both ends. The listing asks for AF_INET
// sockets only, and the peer is AF_INET6: root's client is refused as
// ErrLocalPeerNotFound. FAILS on a2720f1 (a wrong refusal, not an
// admission).
func TestMappedBoundRootPeerOfIPv4Listener(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	testsupport.RequireBinaries(t, "/usr/bin/python3")
	testsupport.Commands(t, []string{"ip", "link", "set", "lo", "up"})
	p := newProber(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if line := firstLine(t, exec.Command("/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_INET6)
s.settimeout(10)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
s.connect(("::ffff:127.0.0.1", `+port+`))
print("up", flush=True)
sys.stdin.read()
`)); line != "up" {
		t.Fatalf("root's IPv6 client: %q", line)
	}
	s := acceptTCP(t, ln)
	uid, found, err := p.PeerOwnerOf(s)
	if err != nil || !found || uid != 0 {
		t.Errorf("root's AF_INET6 client bound to lo, %s -> %s: uid %d, found %v, %v; want uid 0 found",
			s.RemoteAddr(), s.LocalAddr(), uid, found, err)
	}
}

// TestListingAcrossDatagrams: 600 root sockets bound to lo,
// each from its own 127.0.x.y and one source port, all to one listener:
// the port-filtered listing is several datagrams. The first and the last
// are found, and the lookups after them (one-socket and listing) are not
// confused by what the earlier dumps left. Passes.
func TestListingAcrossDatagrams(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	testsupport.Commands(t, []string{"ip", "link", "set", "lo", "up"})
	p := newProber(t)
	ln, _ := loopbackListener(t)
	const n = 600
	sport := uint16(40000)
	var accepted []*net.TCPConn
	for i := 0; i < n; i++ {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(2 + i/250), byte(1 + i%250)}), sport)
		dialBound(t, "lo", from, ln.Addr().String())
		accepted = append(accepted, acceptTCP(t, ln))
	}
	for _, i := range []int{0, n - 1, n / 2, 0, n - 1} {
		s := accepted[i]
		uid, found, err := p.PeerOwnerOf(s)
		if err != nil || !found || uid != 0 {
			t.Errorf("root's bound client %s of %d alike: uid %d, found %v, %v; want uid 0 found", s.RemoteAddr(), n, uid, found, err)
		}
		plain := acceptOwn(t, ln, ln.Addr().String())
		requireOwner(t, p, plain, 0)
	}
}

// TestNoDescriptorGrowth: a thousand lookups (one-socket,
// route, listing, a route lookup's error) and a hundred Probers opened
// and closed leave the process's descriptors as they were. Passes.
func TestNoDescriptorGrowth(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	testsupport.Commands(t, []string{"ip", "link", "set", "lo", "up"})
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		testsupport.RequireNoError(t, err)
		return len(es)
	}
	ln, _ := loopbackListener(t)
	plain := acceptOwn(t, ln, ln.Addr().String())
	dialBound(t, "lo", netip.AddrPort{}, ln.Addr().String())
	bound := acceptTCP(t, ln)
	p := newProber(t)
	requireOwner(t, p, plain, 0)
	before := fds()
	remote := netip.MustParseAddrPort("192.0.2.1:5555") // no route: ENETUNREACH
	for i := 0; i < 1000; i++ {
		switch i % 4 {
		case 0:
			requireOwner(t, p, plain, 0)
		case 1:
			if _, found, err := p.PeerOwner(addrPort(plain.LocalAddr()), remote); found || err != nil {
				t.Fatalf("a peer at %s with no route: found %v, %v", remote, found, err)
			}
		case 2:
			if _, _, err := p.PeerOwnerOf(bound); err != nil && !errors.Is(err, ErrBusy) {
				t.Fatalf("bound: %v", err)
			}
		case 3:
			p.PeerOwner(addrPort(plain.LocalAddr()), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.9"), 1))
		}
	}
	for i := 0; i < 100; i++ {
		q, err := New()
		testsupport.RequireNoError(t, err)
		q.PeerOwner(addrPort(plain.LocalAddr()), remote)
		q.Close()
	}
	if after := fds(); after != before {
		t.Errorf("descriptors: %d before a thousand lookups and a hundred Probers, %d after", before, after)
	}
}

// TestBroadcastSourceNeverConnects: the route to a subnet's
// broadcast address (or 255.255.255.255) is of type broadcast, not local:
// a connection from one would read as another host's. Any user may bind
// one (IP_FREEBIND), but TCP never completes a handshake with it, so no
// such connection is ever accepted. Passes.
func TestBroadcastSourceNeverConnects(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip") {
		return
	}
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "bc0", "type", "veth", "peer", "name", "bc1"},
		[]string{"ip", "link", "set", "bc0", "up"},
		[]string{"ip", "link", "set", "bc1", "up"},
		[]string{"ip", "addr", "add", "10.9.0.1/24", "dev", "bc0"},
	)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	line := otherUserClient(t, nil, `
import socket
r = []
for src in ["10.9.0.255", "255.255.255.255", "0.0.0.0"]:
    for dev in [b"lo", b"bc0", None]:
        s = socket.socket()
        s.settimeout(1)
        s.setsockopt(socket.IPPROTO_IP, 15, 1)  # IP_FREEBIND
        if dev: s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev)
        try:
            s.bind((src, 0)); s.connect(("10.9.0.1", `+port+`))
            r.append("%s:%s" % (src, s.getsockname()[0]))
        except OSError:
            pass
print("done " + " ".join(r), flush=True)
`)
	for _, f := range strings.Fields(strings.TrimPrefix(line, "done")) {
		if src := strings.SplitN(f, ":", 2)[1]; src == "10.9.0.255" || src == "255.255.255.255" || src == "0.0.0.0" {
			t.Errorf("a connection from %s was made (%s)", src, line)
		}
	}
}

// TestRemoteLinkLocalTwinIsRemote: link-local addresses are
// the link's: another host on x0 may hold fe80::1 while this node holds
// fe80::1 on y0 (EUI-64 and fixed ones such as a router's fe80::1 repeat
// across links). The route check drops the zone, asks for fe80::1 with no
// device, and gets y0's local route: the remote host is taken for this
// node's, costs a listing, and is refused as ErrLocalPeerNotFound (or
// ErrBusy). FAILS on a2720f1.
func TestRemoteLinkLocalTwinIsRemote(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	testsupport.RequireBinaries(t, "/usr/bin/python3")
	ns := "r100ll-" + strconv.Itoa(os.Getpid())
	testsupport.Commands(t, []string{"ip", "netns", "add", ns})
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "x0", "type", "veth", "peer", "name", "x1"},
		[]string{"ip", "link", "add", "y0", "type", "veth", "peer", "name", "y1"},
		[]string{"ip", "link", "set", "x1", "netns", ns},
		[]string{"ip", "link", "set", "x0", "up"},
		[]string{"ip", "link", "set", "y0", "up"},
		[]string{"ip", "link", "set", "y1", "up"},
		[]string{"ip", "addr", "add", "fe80::2/64", "dev", "x0", "nodad"},
		[]string{"ip", "addr", "add", "fe80::1/64", "dev", "y0", "nodad"},
		[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
		[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "x1", "up"},
		[]string{"ip", "netns", "exec", ns, "ip", "addr", "add", "fe80::1/64", "dev", "x1", "nodad"},
	)
	p := newProber(t)
	ln, err := net.Listen("tcp", "[::]:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if line := firstLine(t, exec.Command("ip", "netns", "exec", ns, "/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_INET6)
s.settimeout(10)
x1 = socket.if_nametoindex("x1")
s.bind(("fe80::1", 0, 0, x1))
s.connect(("fe80::2", `+port+`, 0, x1))
print("up", flush=True)
sys.stdin.read()
`)); line != "up" {
		t.Fatalf("the remote host's client: %q", line)
	}
	s := acceptTCP(t, ln)
	uid, found, err := p.PeerOwnerOf(s)
	if found || err != nil {
		t.Errorf("a remote host at %s -> %s (this node has fe80::1 on y0 only): uid %d, found %v, %v; want not found, no error (another host)",
			s.RemoteAddr(), s.LocalAddr(), uid, found, err)
	}
}

// TestUidRuleDoesNotHideBoundPeer: an operator's policy rule
// for the other user's uid (`ip rule add uidrange`) sending it to a table
// where the node's address is an ordinary unicast route changes nothing:
// the local table's rule comes first for every uid, and the route check
// asks as root. The other user's socket bound to lo, from the node's
// address, is found as its. Passes.
func TestUidRuleDoesNotHideBoundPeer(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip") {
		return
	}
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "u0", "type", "veth", "peer", "name", "u1"},
		[]string{"ip", "link", "set", "u0", "up"},
		[]string{"ip", "link", "set", "u1", "up"},
		[]string{"ip", "addr", "add", "10.9.0.1/24", "dev", "u0"},
		[]string{"ip", "route", "add", "10.9.0.0/24", "dev", "u1", "table", "100"},
		[]string{"ip", "rule", "add", "pref", "0", "uidrange", "65534-65534", "lookup", "100"},
		[]string{"ip", "rule", "add", "pref", "1", "uidrange", "0-0", "lookup", "100"},
	)
	p := newProber(t)
	ln, err := net.Listen("tcp", "10.9.0.1:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	s := acceptFromOtherUser(t, ln, nil, `
import socket, sys
s = socket.socket()
s.settimeout(10)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"u0")
s.connect(("10.9.0.1", `+port+`))
print("up", flush=True)
sys.stdin.read()
`, "up")
	uid, found, err := p.PeerOwnerOf(s.(*net.TCPConn))
	if !(found && uid == testsupport.OtherUID) && !errors.Is(err, ErrLocalPeerNotFound) {
		t.Errorf("uid %d bound to u0 from %s under a uid rule: uid %d, found %v, %v; want uid %d found",
			testsupport.OtherUID, s.RemoteAddr(), uid, found, err, testsupport.OtherUID)
	}
}

// TestHalfClosedUnboundRootPeerIsRoot: the same half-closed
// root client not bound to a device is found by the one-socket lookup,
// before any established check. Passes.
func TestHalfClosedUnboundRootPeerIsRoot(t *testing.T) {
	p := newProber(t)
	ln, _ := loopbackListener(t)
	c, err := net.Dial("tcp", ln.Addr().String())
	testsupport.RequireNoError(t, err)
	defer c.Close()
	s := acceptTCP(t, ln)
	testsupport.RequireNoError(t, c.(*net.TCPConn).CloseWrite())
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	for i := 0; i < 100; i++ {
		if _, err := s.Read(buf); err != nil {
			break
		}
	}
	uid, found, err := p.PeerOwnerOf(s)
	if err != nil || !found || uid != 0 {
		t.Errorf("root's half-closed client: uid %d, found %v, %v; want uid 0 found", uid, found, err)
	}
}
