package appliance

// Found (and written) by review (helper-97): the daemon's own ports
// against a local user whose socket is bound to a device.

import (
	"net"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// deviceBoundGet is what another local user reads from
// http://addr+path with its socket bound to device (SO_BINDTODEVICE,
// unprivileged since Linux 5.7): the status line, or an error.
func deviceBoundGet(t *testing.T, device, addr, path string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, err := testsupport.AsOtherUser(t, "/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket()
s.settimeout(10)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"`+device+`")
try:
    s.connect(("`+host+`", `+port+`))
    s.sendall(b"GET `+path+` HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        d = s.recv(65536)
        if not d: break
        got += d
except Exception as e:
    print("error: %s" % e); sys.exit(0)
print(got.split(b"\r\n")[0].decode() if got else "closed unread")
`).CombinedOutput()
	if err != nil {
		t.Logf("client: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestDeviceBoundLocalUserReadsMetricsAndSessions: with
// metrics_allow and health_allow admitting the node's own address and no
// *_allow_users, another local user whose socket is bound to the
// address's device (eth1) reads /metrics and /sessions from 10.1.0.2:
// the owner lookup does not find a device-bound socket and takes it for
// another host's. (The same user unbound is refused, as
// TestHealthAndMetricsRefuseOtherLocalUsers checks.)
func TestDeviceBoundLocalUserReadsMetricsAndSessions(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft", "setpriv") {
		return
	}
	n := newReloadNode(t)
	const self = "10.1.0.2"
	_, metrics, health := runAllowListed(t, n, allowListedConfig(n, `["10.1.0.2"]`, "", ""))
	for _, c := range []struct{ addr, path string }{{metrics, "/metrics"}, {health, "/sessions"}} {
		if got := deviceBoundGet(t, "eth1", c.addr, c.path); strings.Contains(got, " 200 ") {
			t.Errorf("uid %d, its socket bound to eth1, read %s from %s: %s", testsupport.OtherUID, c.path, self, got)
		}
	}
}
