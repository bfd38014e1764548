package sdn_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestReaderEdges: after the handshake, a switch's unknown message
// type, a message of another version, an echo of the largest size and a
// malformed body are each read past (the echoes after them are answered,
// the 65,535-byte one verbatim), and a header whose length is below 8
// ends the connection with a framing error rather than a loop or a hang.
// Written by review (helper-64); it passed.
func TestReaderEdges(t *testing.T) {
	ctl, conn, _ := dumpingSession(t, sdn.Config{Keepalive: 10 * time.Second, ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	raw := func(version, typ byte, xid uint32, body []byte) []byte {
		b := []byte{version, typ, 0, 0}
		b = binary.BigEndian.AppendUint32(b, xid)
		b = append(b, body...)
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		return b
	}
	big := make([]byte, ofp13.MaxMessageLen-ofp13.HeaderLen)
	for i := range big {
		big[i] = byte(i)
	}
	send := [][]byte{
		raw(4, 200, 0x640001, []byte("unknown type")),
		raw(5, byte(ofp13.TypeEchoRequest), 0x640002, nil),          // another version
		raw(4, byte(ofp13.TypeFlowRemoved), 0x640003, []byte{1, 2}), // truncated body
		raw(4, byte(ofp13.TypeEchoRequest), 0x640004, big),          // 65,535 bytes
		raw(4, byte(ofp13.TypeEchoRequest), 0x640005, []byte("after")),
	}
	for _, b := range send {
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32]*ofp13.EchoReply{}
	for len(got) < 2 {
		m, err := readOF(conn)
		if err != nil {
			t.Fatalf("waiting for the echo replies (have %d): %v", len(got), err)
		}
		if r, ok := m.(*ofp13.EchoReply); ok && r.XID&0xff0000 == 0x640000 {
			got[r.XID] = r
		}
	}
	if r := got[0x640004]; r == nil || string(r.Data) != string(big) {
		t.Errorf("the 65,535-byte echo was not answered verbatim")
	}
	if got[0x640002] != nil {
		t.Errorf("an echo of version 5 was answered as 1.3")
	}
	// A header of length 4 cannot frame anything: the controller hangs up.
	if _, err := conn.Write([]byte{4, byte(ofp13.TypeEchoRequest), 0, 4, 0, 0, 0, 9}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the switch cut off on a bad header", func() bool {
		st := switchStatus(ctl.Controller, hostileSwitch.Name)
		return !st.Connected && strings.Contains(st.LastError, "length 4")
	})
}
