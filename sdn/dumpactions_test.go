package sdn_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// setFieldFlowPart64 is one FLOW multipart reply part of 65,528 bytes
// holding a single flow entry (priority prio, not owned) with an empty
// match and one apply-actions instruction of 8,181 set_field actions of 8
// bytes each, whose OXM is an empty field of an unassigned class: 8 bytes
// on the wire, a 56-byte *ofp13.ActionSetField plus a 16-byte interface
// once decoded. replyCost counts the instruction as 96 bytes whatever it
// holds.
func setFieldFlowPart64(xid uint32, prio uint16, more bool, action [8]byte) []byte {
	const k = 8181
	instLen := 8 + 8*k
	entryLen := 48 + 8 + instLen
	// ofp_flow_stats: length, table, pad, durations, priority, ...
	b := flowReplyStart(xid, more, entryLen)
	fixed := make([]byte, 46)
	binary.BigEndian.PutUint16(fixed[10:], prio) // priority at entry offset 12
	b = append(b, fixed...)
	// Empty OXM match, padded to 8.
	b = append(b, 0, 1, 0, 4, 0, 0, 0, 0)
	// OFPIT_APPLY_ACTIONS.
	b = binary.BigEndian.AppendUint16(b, ofp13.InstructionTypeApplyActions)
	b = binary.BigEndian.AppendUint16(b, uint16(instLen))
	b = append(b, 0, 0, 0, 0)
	for range k {
		b = append(b, action[:]...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// TestFlowDumpActionsDecodedCostCapped: TestFlowDumpDecodedCostCapped
// with the amplification moved from the match into the actions. replyCost
// charges a decoded instruction a flat instructionCost (96 bytes), but an
// apply-actions instruction of one 64 KiB part holds 8,181 set_field
// actions of 8 bytes, each a 56-byte ActionSetField behind a 16-byte
// interface once decoded (about 600 KiB a part). A declared switch
// answering the first flow dump with such parts stays within
// FlowReplyLimit(…)'s ~36 MiB for some 570 parts, and the controller holds
// them all decoded until the dump ends. The bound is dumpHeapBound.
// Found by review (helper-64): before replyCost counted actions, the heap
// peaked at 574 MiB (set_field) and 421 MiB (raw).
func TestFlowDumpActionsDecodedCostCapped(t *testing.T) {
	for _, c := range []struct {
		name   string
		action [8]byte
	}{
		// OFPAT_SET_FIELD, len 8, OXM class 0x0001 field 0 len 0.
		{"set_field", [8]byte{0, 25, 0, 8, 0x00, 0x01, 0x00, 0x00}},
		// An action type this package keeps raw, len 8.
		{"raw", [8]byte{0x07, 0x77, 0, 8, 1, 2, 3, 4}},
	} {
		t.Run(c.name, func(t *testing.T) { actionDump64(t, c.action) })
	}
}

func actionDump64(t *testing.T, action [8]byte) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: 10 * time.Second, ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	p := newPeak()
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				p.sample()
			}
		}
	}()
	if err := conn.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	const parts = 1200
	size := 0
	for i := range parts {
		b := setFieldFlowPart64(dump.TransactionID(), uint16(i+1), i < parts-1, action)
		if _, err := conn.Write(b); err != nil {
			t.Logf("the controller hung up after %d parts: %v", i, err)
			break
		}
		size += len(b)
	}
	testsupport.Eventually(t, 60*time.Second, "the switch cut off or its dump taken", func() bool {
		st := switchStatus(ctl.Controller, hostileSwitch.Name)
		return !st.Connected || st.LastError != ""
	})
	p.sample()
	close(done)
	<-sampled
	t.Logf("flow dump of %.1f MiB on the wire; switch status: %+v", float64(size)/(1<<20), switchStatus(ctl.Controller, hostileSwitch.Name).LastError)
	p.requireBelow(t, 100, dumpHeapBound)
}
