package appliance

// Written by review (helper-99): the daemon's own ports against a local
// user connecting from an address that is this node's by a local route
// (AnyIP) rather than an interface's, its socket bound to a device.
// A finding: it failed on f21120d.

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestLocalRouteUserReadsMetricsAndSessions: the node has a
// local route for 10.1.0.200 (`ip route add local ... dev lo`, as an
// AnyIP or tproxy setup has), metrics_allow and health_allow name the
// node's /24 (where the controller and Prometheus sit), no
// *_allow_users. Another local user binds 10.1.0.200 (local: no privilege
// needed), binds its socket to lo and reads /metrics and /sessions: the
// peer is not found with no device, 10.1.0.200 is no interface's address,
// so the lookup answers "another host". FAILS (200 OK).
func TestLocalRouteUserReadsMetricsAndSessions(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft", "setpriv") {
		return
	}
	n := newReloadNode(t)
	if out, err := exec.Command("ip", "route", "add", "local", "10.1.0.200/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip route add local: %v: %s", err, out)
	}
	const self = "10.1.0.2"
	_, metrics, health := runAllowListed(t, n, allowListedConfig(n, `["10.1.0.0/24"]`, "", ""))
	for _, c := range []struct{ addr, path string }{{metrics, "/metrics"}, {health, "/sessions"}} {
		host, port := self, strings.TrimPrefix(c.addr, self+":")
		out, err := testsupport.AsOtherUser(t, "/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket()
s.settimeout(10)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
try:
    s.bind(("10.1.0.200", 0))
    s.connect(("`+host+`", `+port+`))
    s.sendall(b"GET `+c.path+` HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        d = s.recv(65536)
        if not d: break
        got += d
except Exception as e:
    print("error: %s" % e); sys.exit(0)
print(got.split(b"\r\n")[0].decode() if got else "closed unread")
`).CombinedOutput()
		got := strings.TrimSpace(string(out))
		if err != nil {
			t.Logf("client: %v", err)
		}
		if strings.Contains(got, " 200 ") {
			t.Errorf("uid %d, from 10.1.0.200 (a local route) bound to lo, read %s from %s: %s", testsupport.OtherUID, c.path, c.addr, got)
		} else {
			t.Logf("%s: %s", c.path, got)
		}
	}
}
