package sdn_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestImpostorRefusedDuringOVSMassDelete is
// TestImpostorRefusedDuringALongConvergence with the real Open vSwitch and
// no hostile switch at all: the bridge carries 20,000 stale owned flows
// (as a larger earlier configuration leaves them), the controller
// connects it and deletes them, and an impostor from the same allowed
// address claims the bridge's datapath id every 100 ms. Before, the echo
// of each claim waited behind the deletes, which Open vSwitch took
// seconds to work through, and was answered later than the keepalive (1
// s): the bridge was taken for dead and the impostor got its session (and
// the session's own keepalive ended it too). Now every claim is refused
// and the bridge converges. Found by review (helper-53).
func TestImpostorRefusedDuringOVSMassDelete(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	sw := flows.Switch{Name: "sw-t", DatapathID: 0x5e61, Forwarding: "normal"}
	// A controller target from the start: OVS flushes the flow table when
	// a bridge gets its first controller.
	br := inst.AddBridge(t, "brt", sw.DatapathID, "tcp:127.0.0.1:9")
	var spec strings.Builder
	const stale = 20000
	for i := range stale {
		fmt.Fprintf(&spec, "table=%d,priority=%d,cookie=%#x,actions=drop\n", i/60000, i%60000+1, flows.CookiePrefix|0x7777)
	}
	file := filepath.Join(t.TempDir(), "stale.flows")
	if err := os.WriteFile(file, []byte(spec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := br.Ofctl("add-flows", file); err != nil {
		t.Fatalf("add-flows: %v %s", err, out)
	}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Second,
		ResyncInterval: -1, Switches: []flows.Switch{sw}})
	// Open vSwitch may take a while with the stale flows; give the
	// database change time.
	if _, err := inst.Vsctl("--timeout=120", "set-controller", br.Name, "tcp:"+addr); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	claims, refused := 0, 0
	for start := time.Now(); time.Since(start) < 60*time.Second; time.Sleep(100 * time.Millisecond) {
		st := switchStatus(ctl.Controller, sw.Name)
		if !st.Connected {
			continue
		}
		if since.IsZero() {
			since = st.ConnectedSince
		}
		if st.Converges > 0 {
			break // the deletes are done
		}
		conn := dialIn(t, inst, "127.0.0.1", addr)
		claims++
		if _, err := claimDatapath(conn, sw.DatapathID); err != nil {
			conn.Close()
			refused++
			continue
		}
		// Answer echoes for 3 s, as a live switch would; a refused claim
		// is hung up on well before.
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		hungUp := false
		for {
			m, err := readOF(conn)
			if err != nil {
				var ne net.Error
				hungUp = !(errorsAs(err, &ne) && ne.Timeout())
				break
			}
			if e, ok := m.(*ofp13.EchoRequest); ok {
				_ = writeOF(conn, &ofp13.EchoReply{XID: e.XID, Data: e.Data})
			}
		}
		if hungUp {
			conn.Close()
			refused++
			continue
		}
		st = switchStatus(ctl.Controller, sw.Name)
		t.Logf("%d claims, %d refused; session now: connected %v from %s since %v (bridge's since %v)",
			claims, refused, st.Connected, st.Remote, st.ConnectedSince.Format("15:04:05.000"), since.Format("15:04:05.000"))
		if st.Remote == conn.LocalAddr().String() {
			t.Fatalf("the impostor took over the session of the connected, answering bridge (claim %d)", claims)
		}
		conn.Close()
	}
	t.Logf("%d claims, %d refused; bridge: %+v", claims, refused, switchStatus(ctl.Controller, sw.Name))
}

func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}
