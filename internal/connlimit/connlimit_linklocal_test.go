package connlimit

// Written by review (helper-101) of 33aa0e0: a local user's link-local
// connection from the node's address on another of its links.

import (
	"net/netip"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestLinkLocalFromOurOtherLinkRefused (finding, fails on
// 33aa0e0): the node has two interfaces on one link (a veth pair here;
// two NICs on one switch in the field), fe80::a on ll0 and fe80::b on
// ll1, and an allow list naming the link-local network (fe80::/64), as
// TestLinkLocalLocalUserRefused. A local user (AllowUsers names no one)
// binds its socket to (fe80::b, ll1) and connects to fe80::a over ll1:
// the listener sees fe80::b%ll0, sockowner asks the route to fe80::b on
// ll0 only (unicast) and calls the peer a remote host, and the user reads
// the endpoint.
func TestLinkLocalFromOurOtherLinkRefused(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip", "/usr/bin/python3") {
		return
	}
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "ll0", "type", "veth", "peer", "name", "ll1"},
		[]string{"ip", "link", "set", "ll0", "up"},
		[]string{"ip", "link", "set", "ll1", "up"},
		[]string{"ip", "addr", "add", "fe80::a/64", "dev", "ll0", "nodad"},
		[]string{"ip", "addr", "add", "fe80::b/64", "dev", "ll1", "nodad"},
	)
	ln, addr := serveOn(t, "[::]:0")
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("fe80::/64")})
	// As a control, over ll0 to its own address: refused (held).
	if got := localUserGet(t, nil, "socket.socket(socket.AF_INET6)", "",
		`("fe80::a", `+portOf(addr)+`, 0, socket.if_nametoindex("ll0"))`); got == "answered" {
		t.Fatalf("uid %d over ll0 was served", testsupport.OtherUID)
	}
	got := localUserGet(t, nil, "socket.socket(socket.AF_INET6)",
		`s.bind(("fe80::b", 0, 0, socket.if_nametoindex("ll1")))`,
		`("fe80::a", `+portOf(addr)+`, 0, socket.if_nametoindex("ll1"))`)
	t.Logf("uid %d from fe80::b%%ll1 to fe80::a: %s", testsupport.OtherUID, got)
	if got == "answered" {
		t.Errorf("uid %d read the endpoint from this node's fe80::b (on ll1) over the link to fe80::a (AllowUsers names no one); denied %d",
			testsupport.OtherUID, ln.Denied())
	}
}
