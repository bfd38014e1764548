package sockowner

// Written by review (helper-97): a local user's sockets the lookup must
// find (bound to a device, link-local, in a user namespace, closed at
// once), and the netlink parse against any datagram. The device-bound and
// link-local tests are its findings: the kernel's one-socket lookup with
// no device missed such a peer, which read as "not on this node".

import (
	"bufio"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// otherUserClient starts /usr/bin/python3 as testsupport.OtherUID running
// script (which must print one line when its connection is made) and
// returns that line; the process is killed at cleanup.
func otherUserClient(t *testing.T, prefix []string, script string) string {
	t.Helper()
	args := append(append([]string{}, prefix...), "/usr/bin/python3", "-c", script)
	return firstLine(t, testsupport.AsOtherUser(t, args[0], args[1:]...))
}

// firstLine starts cmd, a client that prints one line once its
// connection is made and then waits on its standard input, and returns
// that line trimmed; the process is killed at cleanup.
func firstLine(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	testsupport.RequireNoError(t, err)
	out, err := cmd.StdoutPipe()
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the client %v: %q, %v", cmd.Args, line, err)
	}
	return strings.TrimSpace(line)
}

// acceptFromOtherUser runs script as another user (otherUserClient),
// wants want as its first line, and accepts its connection on ln; the
// connection is closed at cleanup.
func acceptFromOtherUser(t *testing.T, ln net.Listener, prefix []string, script, want string) net.Conn {
	t.Helper()
	if line := otherUserClient(t, prefix, script); line != want {
		t.Fatalf("the other user's client: %q", line)
	}
	s, err := ln.Accept()
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPeerBoundToDeviceIsFound: a local user's socket bound to a
// device (SO_BINDTODEVICE needs no privilege since Linux 5.7) connects to
// 127.0.0.1 like any other. Its owner must be found: "not found" reads as
// "not on this node" and connlimit then admits it by address alone.
func TestPeerBoundToDeviceIsFound(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	p := newProber(t)
	ln, port := loopbackListener(t)
	s := acceptFromOtherUser(t, ln, nil, `
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
s.connect(("127.0.0.1", `+port+`))
print("up", flush=True)
sys.stdin.read()
`, "up")
	uid, found, err := p.PeerOwner(addrPort(s.LocalAddr()), addrPort(s.RemoteAddr()))
	if err != nil || !found || uid != testsupport.OtherUID {
		t.Fatalf("uid %d's socket bound to lo, connected %s -> %s: uid %d, found %v, %v; want uid %d found",
			testsupport.OtherUID, s.RemoteAddr(), s.LocalAddr(), uid, found, err, testsupport.OtherUID)
	}
}

// TestPeerLinkLocalIsFound: a connection over IPv6 link-local
// (fe80::/10 with a zone) from this node's own link-local address: the
// kernel binds the client socket to the zone's interface, as
// SO_BINDTODEVICE does. Its owner must be found.
func TestPeerLinkLocalIsFound(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip") {
		return
	}
	p := newProber(t)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "ll0", "type", "veth", "peer", "name", "ll1"},
		{"link", "set", "ll1", "up"},
		{"link", "set", "ll0", "up"},
		{"addr", "add", "fe80::97/64", "dev", "ll0", "nodad"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ln, err := net.Listen("tcp", "[::]:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	s := acceptFromOtherUser(t, ln, nil, `
import socket, sys
s = socket.socket(socket.AF_INET6)
s.settimeout(10)
s.connect(("fe80::97", `+port+`, 0, socket.if_nametoindex("ll0")))
print("up", flush=True)
sys.stdin.read()
`, "up")
	uid, found, err := p.PeerOwner(addrPort(s.LocalAddr()), addrPort(s.RemoteAddr()))
	if err != nil || !found || uid != testsupport.OtherUID {
		t.Fatalf("uid %d over link-local %s -> %s: uid %d, found %v, %v; want uid %d found",
			testsupport.OtherUID, s.RemoteAddr(), s.LocalAddr(), uid, found, err, testsupport.OtherUID)
	}
}

// TestPeerInUserNamespaceIsItsUser: a local user in a user
// namespace of its own (unshare -Ur: root in there) connecting over the
// node's loopback is still its own uid in the view of the daemon's
// netlink socket, not 0.
func TestPeerInUserNamespaceIsItsUser(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "unshare")
	p := newProber(t)
	ln, port := loopbackListener(t)
	line := otherUserClient(t, []string{"unshare", "-Ur"}, `
import os, socket, sys
s = socket.create_connection(("127.0.0.1", `+port+`))
print("up-as-%d" % os.getuid(), flush=True)
sys.stdin.read()
`)
	if line != "up-as-0" {
		t.Fatalf("the client in its user namespace: %q, want up-as-0", line)
	}
	s, err := ln.Accept()
	testsupport.RequireNoError(t, err)
	defer s.Close()
	uid, found, err := p.PeerOwner(addrPort(s.LocalAddr()), addrPort(s.RemoteAddr()))
	if err != nil || !found || uid != testsupport.OtherUID {
		t.Fatalf("uid %d as root of its user namespace: uid %d, found %v, %v; want uid %d found",
			testsupport.OtherUID, uid, found, err, testsupport.OtherUID)
	}
}

// TestClosedPeerIsNotRoot: a local user connects, sends a request
// and closes before the server looks its peer up (a FIN_WAIT2/TIME_WAIT
// or orphaned socket). What the lookup answers is recorded; it must not be
// "root's" (uid 0 found): that reads as root's connection.
func TestClosedPeerIsNotRoot(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	p := newProber(t)
	ln, port := loopbackListener(t)
	s := acceptFromOtherUser(t, ln, nil, `
import socket, sys
s = socket.create_connection(("127.0.0.1", `+port+`))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
s.close()
print("closed", flush=True)
sys.stdin.read()
`, "closed")
	// The client's FIN is in once the server's end reads EOF after the
	// request.
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := s.Read(buf); err != nil {
			break
		}
	}
	uid, found, err := p.PeerOwner(addrPort(s.LocalAddr()), addrPort(s.RemoteAddr()))
	t.Logf("a closed peer of uid %d: uid %d, found %v, err %v", testsupport.OtherUID, uid, found, err)
	if err == nil && found && uid == 0 {
		t.Errorf("uid %d's closed peer socket %s is reported as root's (uid 0 found)", testsupport.OtherUID, s.RemoteAddr())
	}
}

// TestParseNeverPanics: parse on random datagrams and on
// truncations and corruptions of real ones never panics, and every
// message it returns lies inside the datagram; lookup's reads of the
// messages (error code, answer's uid) stay in bounds by their checks.
func TestParseNeverPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(97, 97))
	valid := func(typ uint16, seq uint32, data []byte) []byte {
		b := make([]byte, unix.NLMSG_HDRLEN+len(data))
		binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
		binary.NativeEndian.PutUint16(b[4:], typ)
		binary.NativeEndian.PutUint32(b[8:], seq)
		copy(b[unix.NLMSG_HDRLEN:], data)
		return b
	}
	seeds := [][]byte{
		valid(unix.NLMSG_ERROR, 1, []byte{0xfe, 0xff, 0xff, 0xff}),
		valid(sockDiagByFamily, 2, make([]byte, msgLen)),
		append(valid(unix.NLMSG_ERROR, 1, []byte{0, 0, 0, 0, 1}), valid(sockDiagByFamily, 2, make([]byte, msgLen+3))...),
		valid(unix.NLMSG_ERROR, 1, nil),
	}
	check := func(b []byte) {
		defer func() {
			if e := recover(); e != nil {
				t.Fatalf("parse(%x) panicked: %v", b, e)
			}
		}()
		msgs, err := parse(b)
		if err != nil {
			return
		}
		total := 0
		for _, m := range msgs {
			total += unix.NLMSG_HDRLEN + len(m.data)
			if len(m.data) > len(b) {
				t.Fatalf("parse(%x): a message of %d bytes", b, len(m.data))
			}
		}
		if total > len(b) {
			t.Fatalf("parse(%x): messages of %d bytes in all", b, total)
		}
	}
	for _, s := range seeds {
		for n := 0; n <= len(s); n++ {
			check(s[:n])
		}
	}
	for range 200000 {
		var b []byte
		if r.IntN(2) == 0 {
			b = make([]byte, r.IntN(200))
			for i := range b {
				b[i] = byte(r.Uint32())
			}
		} else {
			s := seeds[r.IntN(len(seeds))]
			b = append([]byte{}, s[:r.IntN(len(s)+1)]...)
			for range r.IntN(4) {
				if len(b) > 0 {
					b[r.IntN(len(b))] = byte(r.Uint32())
				}
			}
			// Lengths near the edges.
			if len(b) >= 4 && r.IntN(3) == 0 {
				binary.NativeEndian.PutUint32(b, uint32(len(b)-r.IntN(4)+r.IntN(4)))
			}
			if len(b) >= 4 && r.IntN(5) == 0 {
				binary.NativeEndian.PutUint32(b, ^uint32(r.IntN(20)))
			}
		}
		check(b)
	}
}

// FuzzParse is TestParseNeverPanics for go test -fuzz.
func FuzzParse(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := parse(b)
		if err == nil {
			for _, m := range msgs {
				if len(m.data) > len(b) {
					t.Fatal("message past the datagram")
				}
			}
		}
	})
}
