package sockowner

// Written by review (helper-101) of 33aa0e0: net.InterfaceAddrs taken
// as the node's addresses lists ones the node does not receive.

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestDadFailedAddressHolderIsRemote (finding, fails on
// 33aa0e0): a remote host on x0's link holds 2001:db8:77::2; the
// operator (or a config shared by two nodes) also gives it to this node,
// whose duplicate address detection fails: the address stays on x0,
// "dadfailed", with no local route (the node does not receive for it;
// the other host does). net.InterfaceAddrs lists it, so receivesAsOwn
// calls it this node's: the remote host's connection costs a listing and
// is refused as ErrLocalPeerNotFound (connlimit refuses it, ownerUnknown)
// where it must be "another host" (found false, no error), as the route
// (not local) says.
func TestDadFailedAddressHolderIsRemote(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "/usr/bin/python3") {
		return
	}
	ns := "r101dad-" + strconv.Itoa(os.Getpid())
	testsupport.Commands(t, []string{"ip", "netns", "add", ns})
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "x0", "type", "veth", "peer", "name", "x1"},
		[]string{"ip", "link", "set", "x1", "netns", ns},
		[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
		[]string{"ip", "netns", "exec", ns, "ip", "addr", "add", "2001:db8:77::2/64", "dev", "x1", "nodad"},
		[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "x1", "up"},
		[]string{"ip", "addr", "add", "2001:db8:77::1/64", "dev", "x0", "nodad"},
		[]string{"ip", "link", "set", "x0", "up"},
		[]string{"ip", "addr", "add", "2001:db8:77::2/64", "dev", "x0"},
	)
	testsupport.Eventually(t, 20*time.Second, "this node's 2001:db8:77::2 fails duplicate address detection", func() bool {
		out, _ := exec.Command("ip", "-6", "addr", "show", "dev", "x0", "dadfailed").CombinedOutput()
		return strings.Contains(string(out), "2001:db8:77::2")
	})
	if out, _ := exec.Command("ip", "-6", "route", "get", "2001:db8:77::2").CombinedOutput(); strings.HasPrefix(string(out), "local") {
		t.Fatalf("the dadfailed address has a local route: %s", out)
	}
	p := newProber(t)
	ln, err := net.Listen("tcp", "[2001:db8:77::1]:0")
	testsupport.RequireNoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if line := firstLine(t, exec.Command("ip", "netns", "exec", ns, "/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_INET6)
s.settimeout(10)
s.bind(("2001:db8:77::2", 0))
s.connect(("2001:db8:77::1", `+port+`))
print("up", flush=True)
sys.stdin.read()
`)); line != "up" {
		t.Fatalf("the remote host's client: %q", line)
	}
	s := acceptTCP(t, ln)
	uid, found, err := p.PeerOwnerOf(s)
	t.Logf("remote host %s -> %s: uid %d, found %v, %v", s.RemoteAddr(), s.LocalAddr(), uid, found, err)
	if found || err != nil {
		t.Errorf("the remote host holding 2001:db8:77::2 (this node's copy dadfailed, no local route): uid %d, found %v, %v; want not found, no error (another host)",
			uid, found, err)
	}
}
