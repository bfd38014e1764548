package connlimit

// Written by review (helper-97): a local user other than root against
// an allow list, on every way of reaching it from this node. The
// device-bound and link-local tests are its findings (admitted by address
// alone, as a remote host); the rest held.

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// localUserGet runs, as testsupport.OtherUID (behind prefix, e.g.
// unshare), a Python client that makes socket (a Python expression)
// connect to target (a Python address tuple) after setup, sends one
// request and prints what it read; it returns that.
func localUserGet(t *testing.T, prefix []string, socket, setup, target string) string {
	t.Helper()
	script := `
import socket, sys
s = ` + socket + `
s.settimeout(10)
` + setup + `
try:
    s.connect(` + target + `)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        d = s.recv(4096)
        if not d: break
        got += d
except Exception as e:
    print("error: %s" % e); sys.exit(0)
print("answered" if got.endswith(b"ok") else "unanswered: %r" % got)
`
	args := append(append([]string{}, prefix...), "/usr/bin/python3", "-c", script)
	out, err := testsupport.AsOtherUser(t, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Logf("client: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestDeviceBoundLocalUserRefused: the attack of helper-90 again,
// with the local user's socket bound to lo (SO_BINDTODEVICE, unprivileged
// since Linux 5.7): the kernel's one-socket lookup with no interface
// misses a device-bound socket, "not found" reads as "another host", and
// the connection is admitted by its address 127.0.0.1 alone.
func TestDeviceBoundLocalUserRefused(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	ln, addr := serve(t, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	requireBoundRefused(t, ln, "127.0.0.1", portOf(addr), "lo")
}

// requireBoundRefused checks that another local user connecting to
// host:port is refused by ln, unbound (a control) and with its socket
// bound to device dev.
func requireBoundRefused(t *testing.T, ln *Listener, host, port, dev string) {
	t.Helper()
	if got := localUserGet(t, nil, "socket.socket()", "", `("`+host+`", `+port+`)`); got == "answered" {
		t.Fatalf("uid %d unbound was served", testsupport.OtherUID)
	}
	got := localUserGet(t, nil, "socket.socket()",
		`s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"`+dev+`")`,
		`("`+host+`", `+port+`)`)
	if got == "answered" {
		t.Errorf("uid %d with its socket bound to %s read the endpoint from %s (AllowUsers names no one); denied %d", testsupport.OtherUID, dev, host, ln.Denied())
	}
}

// TestDeviceBoundNodeAddressRefused: the same from the node's own
// address (10.97.0.1 on a veth), the socket bound to that address's
// device rather than lo: looking up with the ingress interface (lo) would
// not find it either.
func TestDeviceBoundNodeAddressRefused(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip") {
		return
	}
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "ll0", "type", "veth", "peer", "name", "ll1"},
		[]string{"ip", "link", "set", "ll1", "up"},
		[]string{"ip", "link", "set", "ll0", "up"},
		[]string{"ip", "addr", "add", "10.97.0.1/24", "dev", "ll0"},
	)
	ln, addr := serveOn(t, "10.97.0.1:0")
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("10.97.0.1/32")})
	requireBoundRefused(t, ln, "10.97.0.1", portOf(addr), "ll0")
}

// TestLinkLocalLocalUserRefused: an allow list naming the node's
// link-local network (fe80::/64), a dual-stack listener, and a local user
// connecting to the node's own link-local address with its zone (the
// kernel binds such a socket to the zone's interface): served by address.
func TestLinkLocalLocalUserRefused(t *testing.T) {
	if !testsupport.InFreshNetns(t, "setpriv", "ip") {
		return
	}
	testsupport.Commands(t,
		[]string{"ip", "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", "ll0", "type", "veth", "peer", "name", "ll1"},
		[]string{"ip", "link", "set", "ll1", "up"},
		[]string{"ip", "link", "set", "ll0", "up"},
		[]string{"ip", "addr", "add", "fe80::97/64", "dev", "ll0", "nodad"},
	)
	ln, addr := serveOn(t, "[::]:0")
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("fe80::/64")})
	got := localUserGet(t, nil, "socket.socket(socket.AF_INET6)", "",
		`("fe80::97", `+portOf(addr)+`, 0, socket.if_nametoindex("ll0"))`)
	if got == "answered" {
		t.Errorf("uid %d read the endpoint over link-local fe80::97%%ll0; denied %d", testsupport.OtherUID, ln.Denied())
	}
}

// TestUserNamespaceRootRefused: a local user root only in a user
// namespace of its own (unshare -Ur, same network namespace) is still
// that user, and refused. Passes.
func TestUserNamespaceRootRefused(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "unshare")
	ln, addr := serve(t, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	got := localUserGet(t, []string{"unshare", "-Ur"}, "socket.socket()", "", `("127.0.0.1", `+portOf(addr)+`)`)
	if got == "answered" {
		t.Errorf("uid %d as root of its own user namespace read the endpoint", testsupport.OtherUID)
	}
	if ln.Denied() != 1 {
		t.Errorf("denied %d, want 1", ln.Denied())
	}
}

// TestIPv6LoopbackAndMappedRefused: ::1, and an IPv4 client of a
// dual-stack listener (mapped addresses), from another local user are
// refused; root's are served. Passes.
func TestIPv6LoopbackAndMappedRefused(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	ln, addr := serveOn(t, "[::]:0")
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")})
	port := portOf(addr)
	for _, c := range []struct{ sock, target string }{
		{"socket.socket()", `("127.0.0.1", ` + port + `)`},
		{"socket.socket(socket.AF_INET6)", `("::1", ` + port + `)`},
		{"socket.socket(socket.AF_INET6)", `("::ffff:127.0.0.1", ` + port + `)`},
	} {
		if got := localUserGet(t, nil, c.sock, "", c.target); got == "answered" {
			t.Errorf("uid %d to %s was served", testsupport.OtherUID, c.target)
		}
	}
	for _, target := range []string{"127.0.0.1:" + port, "[::1]:" + port} {
		if err := get(dialFrom(t, "", target)); err != nil {
			t.Errorf("root to %s: %v", target, err)
		}
	}
}

// TestRemoteHostJudgedByAddress: a host in another network
// namespace (veth) is judged by its address alone: root there from an
// allowed address is served, from another address refused. Passes.
func TestRemoteHostJudgedByAddress(t *testing.T) {
	if !testsupport.InFreshNetns(t) {
		return
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rv0"}, PeerName: "rv1"}
	testsupport.RequireNoError(t, netlink.LinkAdd(veth))
	testsupport.RequireNoError(t, netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.98.0.1").To4(), Mask: net.CIDRMask(24, 32)}}))
	testsupport.RequireNoError(t, netlink.LinkSetUp(veth))
	ln, addr := serveOn(t, "10.98.0.1:0")
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("10.98.0.2/32")})

	type result struct{ allowed, other error }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its namespace
		var r result
		r.allowed = func() error {
			parent, err := netns.Get()
			if err != nil {
				return err
			}
			defer parent.Close()
			own, err := netns.New()
			if err != nil {
				return err
			}
			defer own.Close()
			there, err := netlink.NewHandleAt(parent)
			if err != nil {
				return err
			}
			defer there.Close()
			link, err := there.LinkByName("rv1")
			if err != nil {
				return err
			}
			if err := there.LinkSetNsFd(link, int(own)); err != nil {
				return err
			}
			if link, err = netlink.LinkByName("rv1"); err != nil {
				return err
			}
			for _, a := range []string{"10.98.0.2", "10.98.0.3"} {
				if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a).To4(), Mask: net.CIDRMask(24, 32)}}); err != nil {
					return err
				}
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
			dial := func(from string) (net.Conn, error) {
				d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
				return d.Dial("tcp", addr)
			}
			c, err := dial("10.98.0.3")
			if err != nil {
				r.other = err
			} else {
				if !refusedUnread(t, c) {
					r.other = errString("served")
				}
				c.Close()
			}
			c, err = dial("10.98.0.2")
			if err != nil {
				return err
			}
			defer c.Close()
			return get(c)
		}()
		done <- r
	}()
	r := <-done
	if r.allowed != nil {
		t.Errorf("root on another host from the allowed 10.98.0.2: %v", r.allowed)
	}
	if r.other != nil {
		t.Errorf("another host from 10.98.0.3 (not allowed): %v", r.other)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// serveOn is serve on the listen address given.
func serveOn(t *testing.T, listen string) (*Listener, string) {
	t.Helper()
	raw, err := net.Listen("tcp", listen)
	testsupport.RequireNoError(t, err)
	ln := New(raw, 16, 8)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute,
	}
	ln.Track(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln, raw.Addr().String()
}

// TestDeviceBoundFloodRefusedAndBounded: a local user's connections bound
// to a device each need a listing of the node's sockets (milliseconds:
// the kernel walks its whole table), made at most
// sockowner.ListingsPerSecond times a second (found by review, helper-99:
// each cost a walk of every interface in the accept loop, and root's
// checks waited behind them). 100 of them one after another (each alone
// in its listing, so past the budget's burst each waits its turn) are all
// refused, and root is served right after. (Many at once share a
// listing: TestDeviceBoundFloodDoesNotDenyRoot.)
func TestDeviceBoundFloodRefusedAndBounded(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "python3")
	ln, addr := serve(t, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	script := `
import socket
answered = 0
for i in range(100):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
    s.settimeout(10)
    try:
        s.connect(("127.0.0.1", ` + portOf(addr) + `))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if s.recv(4096):
            answered += 1
    except Exception:
        pass
    s.close()
print(answered)
`
	out, err := testsupport.AsOtherUser(t, "/usr/bin/python3", "-c", script).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("uid %d's 100 device-bound connections: %v, %d answered (%q)", testsupport.OtherUID, err, len(out), strings.TrimSpace(string(out)))
	}
	if d := ln.Denied(); d != 100 {
		t.Errorf("denied %d, want 100", d)
	}
	if err := get(dialFrom(t, "127.0.0.1", addr)); err != nil {
		t.Fatalf("root after the flood: %v", err)
	}
}
