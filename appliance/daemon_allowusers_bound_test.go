package appliance

// Found (and written) by review (helper-97): the daemon's own ports
// against a local user whose socket is bound to a device.

import (
	"net"
	"strings"
	"testing"
	"time"

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
	c := n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
	c = strings.Replace(c, `daemon { shutdown_timeout = "2s" }`,
		"daemon {\n  shutdown_timeout = \"2s\"\n  metrics_allow = [\"10.1.0.2\"]\n}", 1)
	c = strings.Replace(c, `    tuning      = ["t"]`, `    tuning      = ["t"]`+"\n    health_allow = [\"10.1.0.2\"]", 1)
	writeFile(t, n.cfgPath, c)
	const self = "10.1.0.2"
	metrics, health := self+":9465", self+":9878"
	d := n.daemonWith(metrics)
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "the controller sees a1 up", func() bool {
		for _, a := range d.Status().Agents {
			if a.Name == "a1" && !a.Local && a.Healthy {
				return true
			}
		}
		return false
	})
	for _, c := range []struct{ addr, path string }{{metrics, "/metrics"}, {health, "/sessions"}} {
		if got := deviceBoundGet(t, "eth1", c.addr, c.path); strings.Contains(got, " 200 ") {
			t.Errorf("uid %d, its socket bound to eth1, read %s from %s: %s", testsupport.OtherUID, c.path, self, got)
		}
	}
}
