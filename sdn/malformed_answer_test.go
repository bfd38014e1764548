package sdn_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// fixesFrame is a whole frame of the given type and xid whose body
// does not decode: a header, then body.
func fixesFrame(typ ofp13.Type, xid uint32, body []byte) []byte {
	b := []byte{ofp13.Version, byte(typ), 0, 0}
	b = binary.BigEndian.AppendUint32(b, xid)
	b = append(b, body...)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// fixesOneDelete starts a controller with one stale owned flow on a
// declared switch, and returns it with the switch's side and the delete
// flow mod the controller sends for it (the barrier after it is left
// unread).
func fixesOneDelete(t *testing.T) (*running, net.Conn, ofp13.Message) {
	t.Helper()
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: time.Minute, ConvergeTimeout: 10 * time.Second,
		ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	for _, part := range staleDump(dump.TransactionID(), 1) {
		if err := writeOF(conn, part); err != nil {
			t.Fatal(err)
		}
	}
	mod := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeFlowMod })
	return ctl, conn, mod
}

func fixesAnswerBarrier(t *testing.T, conn net.Conn) {
	t.Helper()
	b := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeBarrierRequest })
	if err := writeOF(conn, &ofp13.BarrierReply{XID: b.TransactionID()}); err != nil {
		t.Fatal(err)
	}
}

// TestRefusalNotErasedByMalformedMessage: the switch refuses the
// flow mod with a well-formed ERROR, then sends a frame that does not
// decode (a FEATURES_REPLY cut to its header) carrying the same xid, then
// answers the barrier. failAnswered overwrites the quiet entry's p.err
// (the *ofp13.Error) with its own "malformed ..." error, which Apply's
// refused() does not recognise: the refusal vanishes, the convergence is
// reported clean.
// Found by review (helper-69) of a736a2b, whose failAnswered let a
// malformed message of any type overwrite the refusal of a flow mod.
func TestRefusalNotErasedByMalformedMessage(t *testing.T) {
	ctl, conn, mod := fixesOneDelete(t)
	xid := mod.TransactionID()
	if err := writeOF(conn, &ofp13.Error{XID: xid, Type: ofp13.ErrorTypeFlowModFailed, Code: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(fixesFrame(ofp13.TypeFeaturesReply, xid, nil)); err != nil {
		t.Fatal(err)
	}
	fixesAnswerBarrier(t, conn)
	var st sdn.SwitchStatus
	testsupport.Eventually(t, 15*time.Second, "the convergence to end", func() bool {
		st = switchStatus(ctl.Controller, hostileSwitch.Name)
		return st.Converges > 0 || st.LastError != ""
	})
	n := ctl.Controller.Status().Counters.FlowModErrors
	t.Logf("converges %d, last error %q, flow errors %q, flow mod errors counted %d", st.Converges, st.LastError, st.FlowErrors, n)
	if n != 1 || len(st.FlowErrors) != 1 {
		t.Errorf("the switch refused the flow mod with a well-formed ERROR, then sent a malformed frame with its xid: counted %d refusals, listed %q, want 1",
			n, st.FlowErrors)
	}
}

// TestMalformedErrorIsARefusal: the switch answers the flow mod
// with an ERROR too short to decode (type, no code), then the barrier.
// failAnswered's comment says "an error that cannot be read is still the
// switch refusing", and it records it on the quiet entry; but Apply only
// counts *ofp13.Error values, so the convergence is reported clean: the
// flow mod the switch refused counts as applied.
// Found by review (helper-69): before FlowError.Unreadable, an error
// that did not decode was no refusal.
func TestMalformedErrorIsARefusal(t *testing.T) {
	ctl, conn, mod := fixesOneDelete(t)
	if _, err := conn.Write(fixesFrame(ofp13.TypeError, mod.TransactionID(), []byte{0, 5})); err != nil {
		t.Fatal(err)
	}
	fixesAnswerBarrier(t, conn)
	var st sdn.SwitchStatus
	testsupport.Eventually(t, 15*time.Second, "the convergence to end", func() bool {
		st = switchStatus(ctl.Controller, hostileSwitch.Name)
		return st.Converges > 0 || st.LastError != ""
	})
	n := ctl.Controller.Status().Counters.FlowModErrors
	t.Logf("converges %d, last error %q, flow errors %q, flow mod errors counted %d", st.Converges, st.LastError, st.FlowErrors, n)
	if st.LastError == "" {
		t.Errorf("the switch answered the flow mod with a malformed ERROR: the convergence is reported clean (converges %d, flow mod errors %d)", st.Converges, n)
	}
}

// TestMalformedWrongTypeIgnored: a frame that does not decode,
// of another type (per its header) than the one answering the flow dump
// (a FEATURES_REPLY cut to its header), carrying the dump's xid, is
// ignored as its well-formed counterpart is: the dump completes and the
// stale flow is deleted. And a malformed MULTIPART_REPLY with the xid
// fails the dump (no delete before the retry).
// Written by review (helper-69); it passed.
func TestMalformedWrongTypeIgnored(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: time.Minute, ConvergeTimeout: 10 * time.Second,
		ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	if _, err := conn.Write(fixesFrame(ofp13.TypeFeaturesReply, dump.TransactionID(), nil)); err != nil {
		t.Fatal(err)
	}
	for _, part := range staleDump(dump.TransactionID(), 1) {
		if err := writeOF(conn, part); err != nil {
			t.Fatal(err)
		}
	}
	deleted := false
	b := readUntil(t, conn, func(m ofp13.Message) bool {
		if fm, ok := m.(*ofp13.FlowMod); ok && fm.Command == ofp13.FlowDeleteStrict {
			deleted = true
		}
		return m.MessageType() == ofp13.TypeBarrierRequest
	})
	if !deleted {
		t.Errorf("a malformed FEATURES_REPLY with the dump's xid changed the dump: the stale flow was not deleted")
	}
	if err := writeOF(conn, &ofp13.BarrierReply{XID: b.TransactionID()}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 15*time.Second, "the convergence to end", func() bool {
		st := switchStatus(ctl.Controller, hostileSwitch.Name)
		return st.Converges > 0 && st.LastError == ""
	})
}
