package sdn_test

import (
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestMalformedDumpPartNotTakenAsWhole: a switch answers the
// flow dump in three parts; the middle one, holding the stale owned flow
// B, does not decode (an output action 24 bytes long). readLoop logs a
// malformed message and carries on, so the dump completes with the first
// and last parts only: the controller plans against a table without B,
// deletes the stale flow A beside it, and never B, and calls the switch
// converged. A reply part it could not read must fail the request it
// belongs to (the plan is then retried), not vanish from it.
// Found by review (helper-64): before failAnswered, B stayed and the
// switch showed converged.
func TestMalformedDumpPartNotTakenAsWhole(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: 10 * time.Second, ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	xid := dump.TransactionID()
	stale := func(prio uint16, ins []ofp13.Instruction) ofp13.FlowStats {
		return ofp13.FlowStats{Priority: prio, Cookie: flows.CookiePrefix | 0x7777, Instructions: ins}
	}
	out := []ofp13.Instruction{&ofp13.ApplyActions{Actions: []ofp13.Action{&ofp13.ActionOutput{Port: 1}}}}
	bad := []ofp13.Instruction{&ofp13.ApplyActions{Actions: []ofp13.Action{&ofp13.ActionRaw{Type: ofp13.ActionTypeOutput, Body: make([]byte, 20)}}}}
	parts := []*ofp13.FlowStatsReply{
		{XID: xid, Flags: ofp13.MultipartMore, Stats: []ofp13.FlowStats{stale(101, out)}},
		{XID: xid, Flags: ofp13.MultipartMore, Stats: []ofp13.FlowStats{stale(102, bad)}},
		{XID: xid},
	}
	for _, p := range parts {
		if err := writeOF(conn, p); err != nil {
			t.Fatal(err)
		}
	}
	// Read what the controller sends next, up to its first barrier.
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	deleted := map[uint16]bool{}
	for {
		m, err := readOF(conn)
		if err != nil {
			t.Logf("no barrier from the controller: %v", err)
			break
		}
		if fm, ok := m.(*ofp13.FlowMod); ok && fm.Command == ofp13.FlowDeleteStrict {
			deleted[fm.Priority] = true
		}
		if m.MessageType() == ofp13.TypeBarrierRequest {
			if err := writeOF(conn, &ofp13.BarrierReply{XID: m.TransactionID()}); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	t.Logf("deleted by priority: %v; switch status: converges %d, installed %d, last error %q", deleted, st.Converges, st.InstalledFlows, st.LastError)
	if deleted[101] && !deleted[102] {
		t.Errorf("the controller acted on a flow dump one part of which it could not read: it deleted stale flow A (priority 101) and not B (102), last error %q",
			st.LastError)
	}
}
