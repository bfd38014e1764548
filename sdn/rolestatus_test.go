package sdn_test

import (
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestRoleStatusWithoutRolesIgnored: without Config.Roles the controller
// requests no role and has no use for a switch's ROLE_STATUS. Before,
// every one kicked the session, and a kick is a full convergence: a flow
// dump, a compile of the switch's flow set, a diff, the flow mods, a
// barrier, an Info line when it sent any. A declared switch that sent a
// 32-byte ROLE_STATUS whenever it answered a dump kept its session
// converging back to back, thousands a second. Now, with roles off, a
// ROLE_STATUS causes no convergence beyond the first (and with roles on,
// only one that changes the role does). Found by review (helper-53).
func TestRoleStatusWithoutRolesIgnored(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: 2 * time.Second, ResyncInterval: -1,
		Switches: []flows.Switch{hostileSwitch}})
	conn := declaredSession(t, ctl, ln.Addr().String(), hostileSwitch)
	dumps, sent := 0, 0
	logBefore := len(ctl.logs.String())
	deadline := time.Now().Add(3 * time.Second)
	if err := conn.SetReadDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		m, err := readOF(conn)
		if err != nil {
			break
		}
		switch m.MessageType() {
		case ofp13.TypeMultipartRequest:
			dumps++
			if err := writeOF(conn, &ofp13.FlowStatsReply{XID: m.TransactionID()}); err != nil {
				t.Fatal(err)
			}
			if err := writeOF(conn, &ofp13.RoleStatus{Role: ofp13.RoleSlave, Reason: ofp13.RoleReasonConfig}); err != nil {
				t.Fatal(err)
			}
			sent += 16 + 32
		case ofp13.TypeBarrierRequest:
			if err := writeOF(conn, &ofp13.BarrierReply{XID: m.TransactionID()}); err != nil {
				t.Fatal(err)
			}
			sent += 8
		case ofp13.TypeEchoRequest:
			_ = writeOF(conn, &ofp13.EchoReply{XID: m.TransactionID()})
		}
	}
	st := ctl.Status()
	t.Logf("in 3 s: %d flow dumps answered, %d convergences, %d role status messages counted; the switch sent %d bytes, the controller logged %d",
		dumps, switchStatus(ctl.Controller, hostileSwitch.Name).Converges, st.Counters.RoleStatus, sent, len(ctl.logs.String())-logBefore)
	if dumps > 2 {
		t.Errorf("with roles off, a switch's ROLE_STATUS messages drove %d flow dumps in 3 s", dumps)
	}
}
