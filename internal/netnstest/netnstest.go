// Package netnstest gives tests a network namespace from which they can
// connect from any address of an IPv6 prefix, as a host holding a whole
// /64 (or many hosts of one LAN) would.
package netnstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// Documentation is the prefix every address of the namespace is in
// (RFC 3849).
const Documentation = "2001:db8::/32"

// AnyIPv6 creates a network namespace, named after prefix and the
// process, where every address of Documentation is local and may be
// bound without being configured (ip_nonlocal_bind), and removes it when
// the test ends. It needs root, ip and sysctl.
func AnyIPv6(t testing.TB, prefix string) string {
	t.Helper()
	testsupport.RequireRoot(t, "ip", "sysctl")
	ns := fmt.Sprintf("%s%d", prefix, os.Getpid())
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "set", "lo", "up")
	run("ip", "-n", ns, "-6", "route", "add", "local", Documentation, "dev", "lo")
	run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1")
	return ns
}

// Dial connects to addr in ns from each of srcs, in order, and closes
// the connections when the test ends.
func Dial(t testing.TB, ns, addr string, srcs ...netip.Addr) []net.Conn {
	t.Helper()
	var out []net.Conn
	t.Cleanup(func() {
		for _, c := range out {
			_ = c.Close()
		}
	})
	err := tuning.RunInNamedNetns(ns, func() error {
		for _, src := range srcs {
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 5 * time.Second}
			c, err := d.Dial("tcp6", addr)
			if err != nil {
				return fmt.Errorf("dial %s from %s: %w", addr, src, err)
			}
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
