package sdn_test

import (
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// flowReplyStart is a FLOW multipart reply part up to the length of its
// one flow entry of entryLen bytes (the length is not set: it is written
// once the message is whole).
func flowReplyStart(xid uint32, more bool, entryLen int) []byte {
	b := make([]byte, 0, 16+entryLen)
	b = append(b, ofp13.Version, byte(ofp13.TypeMultipartReply), 0, 0)
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint16(b, uint16(ofp13.MultipartFlow))
	flags := uint16(0)
	if more {
		flags = ofp13.MultipartMore
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = append(b, 0, 0, 0, 0)
	return binary.BigEndian.AppendUint16(b, uint16(entryLen))
}

// fatFlowPart is one FLOW multipart reply part of 65,528 bytes that
// holds a single flow entry whose match is 16,365 empty OXM fields of an
// unassigned class: 4 bytes each on the wire, a 56-byte ofp13.OXM each
// once decoded.
func fatFlowPart(xid uint32, more bool) []byte {
	const k = 16365
	matchLen := 4 + 4*k
	entryLen := 48 + matchLen
	b := flowReplyStart(xid, more, entryLen)
	b = append(b, make([]byte, 46)...)
	b = binary.BigEndian.AppendUint16(b, ofp13.MatchTypeOXM)
	b = binary.BigEndian.AppendUint16(b, uint16(matchLen))
	for range k {
		b = append(b, 0x00, 0x01, 0x00, 0x00)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// staleDump is a flow dump's reply, for xid, of stale owned flows (as a
// larger earlier configuration leaves them: each of its own priority), in
// parts of 1,000.
func staleDump(xid uint32, stale int) []*ofp13.FlowStatsReply {
	var parts []*ofp13.FlowStatsReply
	for i := 0; i < stale; i += 1000 {
		part := &ofp13.FlowStatsReply{XID: xid}
		if i+1000 < stale {
			part.Flags = ofp13.MultipartMore
		}
		for j := i; j < min(i+1000, stale); j++ {
			part.Stats = append(part.Stats, ofp13.FlowStats{TableID: uint8(j / 60000), Priority: uint16(j%60000 + 1),
				Cookie: flows.CookiePrefix | 0x7777})
		}
		parts = append(parts, part)
	}
	return parts
}

// refuseFlowMods answers the next n flow mods the controller sends on
// conn with an ERROR carrying data, and every barrier before the last of
// them with its reply, and returns the bytes it sent. It leaves the
// barrier after the last flow mod unread.
func refuseFlowMods(t *testing.T, conn net.Conn, n int, data []byte) (sent int) {
	t.Helper()
	for mods := 0; mods < n; {
		m, err := readOF(conn)
		if err != nil {
			t.Fatalf("reading from the controller after %d flow mods: %v", mods, err)
		}
		var answer ofp13.Message
		switch m.MessageType() {
		case ofp13.TypeFlowMod:
			answer = &ofp13.Error{XID: m.TransactionID(), Type: ofp13.ErrorTypeFlowModFailed, Code: 4, Data: data}
			mods++
		case ofp13.TypeBarrierRequest:
			answer = &ofp13.BarrierReply{XID: m.TransactionID()}
		default:
			continue
		}
		b, err := answer.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatalf("the controller hung up after %d flow mods: %v", mods, err)
		}
		sent += len(b)
	}
	return sent
}

// dumpingSession starts a controller with cfg (on a listener of its own)
// for sw, completes sw's handshake as declaredSession does, and returns
// the controller, the switch's side and the flow dump request the
// controller sent first.
func dumpingSession(t *testing.T, cfg sdn.Config, sw flows.Switch) (*running, net.Conn, ofp13.Message) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener, cfg.Switches = ln, []flows.Switch{sw}
	ctl := startController(t, cfg)
	conn := declaredSession(t, ctl, ln.Addr().String(), sw)
	dump := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeMultipartRequest })
	return ctl, conn, dump
}

// declaredSession completes the handshake of a declared switch against
// the controller listening at addr.
func declaredSession(t *testing.T, ctl *running, addr string, sw flows.Switch) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := claimDatapath(conn, sw.DatapathID); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the switch's session", func() bool {
		return switchStatus(ctl.Controller, sw.Name).Connected
	})
	return conn
}

// readUntil reads what the controller sends until want says stop,
// answering nothing; it returns that message.
func readUntil(t *testing.T, conn net.Conn, want func(ofp13.Message) bool) ofp13.Message {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := readOF(conn)
		if err != nil {
			t.Fatalf("reading from the controller: %v", err)
		}
		if want(m) {
			return m
		}
	}
}

// TestReplyOfTheWrongTypeDropped: the reply to one request is capped at
// DefaultReplyLimit, 16 MiB and 1,024 parts, on the wire. A declared
// switch answered the barrier that follows its first flow mods with 256
// parts of 64 KiB of a flow dump, each one flow entry whose match is
// 16,365 empty OXM fields, MORE set on all, just under the cap. Decoded,
// each 4-byte OXM is a 56-byte struct: the pending barrier held about 270
// MiB of heap, for as long as the switch left it unfinished. A reply of
// another type than the request's (a multipart reply to a barrier) is
// now dropped. Found by review (helper-53); the bound is
// TestEndlessMultipartMore's.
func TestReplyOfTheWrongTypeDropped(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: 2 * time.Second, ResyncInterval: -1}, hostileSwitch)
	if err := writeOF(conn, &ofp13.FlowStatsReply{XID: dump.TransactionID()}); err != nil {
		t.Fatal(err)
	}
	barrier := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeBarrierRequest })

	p := newPeak()
	part := fatFlowPart(barrier.TransactionID(), true)
	const parts = 256 // 256 * 65,528 bytes is just under 16 MiB
	if err := conn.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		if _, err := conn.Write(part); err != nil {
			t.Fatalf("the controller hung up after %d parts: %v", i, err)
		}
	}
	// The reader handles messages in order: once our echo is answered,
	// every part before it is decoded and held by the pending barrier.
	if err := writeOF(conn, &ofp13.EchoRequest{XID: 0x5353}); err != nil {
		t.Fatal(err)
	}
	readUntil(t, conn, func(m ofp13.Message) bool {
		return m.MessageType() == ofp13.TypeEchoReply && m.TransactionID() == 0x5353
	})
	runtime.GC()
	p.sample()
	t.Logf("sent %d parts, %.1f MiB on the wire; the switch's session is connected: %v", parts,
		float64(parts*len(part))/(1<<20), switchStatus(ctl.Controller, hostileSwitch.Name).Connected)
	p.requireBelow(t, 100, 96<<20)
}

// TestSwitchErrorsKeptShort: every flow mod of a convergence waits,
// quietly, for the barrier after it, and a switch ERROR for its xid is
// kept until then. A declared switch reports 4,000 stale owned flows in
// its flow dump and answers each delete with an ERROR carrying 65,500
// bytes of data, and each barrier with its reply. Each ERROR was kept
// whole, with the buffer it came in: about 250 MiB of heap, growing with
// the stale flows the switch claims (some 9 GiB at the reply limit). Now
// only the first 64 bytes of an ERROR's data are kept. Found by review
// (helper-53).
func TestSwitchErrorsKeptShort(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: 10 * time.Second, ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	const stale = 4000
	for _, part := range staleDump(dump.TransactionID(), stale) {
		if err := writeOF(conn, part); err != nil {
			t.Fatal(err)
		}
	}
	p := newPeak()
	data := make([]byte, ofp13.MaxMessageLen-ofp13.HeaderLen-4-31)
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Every delete answered with an ERROR, every barrier but the last
	// with its reply; the last is left pending, so that the convergence
	// holds every ERROR when the heap is measured.
	errs := stale
	refuseFlowMods(t, conn, stale, data)
	if err := writeOF(conn, &ofp13.EchoRequest{XID: 0x5353}); err != nil {
		t.Fatal(err)
	}
	readUntil(t, conn, func(m ofp13.Message) bool {
		return m.MessageType() == ofp13.TypeEchoReply && m.TransactionID() == 0x5353
	})
	runtime.GC()
	p.sample()
	t.Logf("sent %d errors of %d bytes; the switch's session is connected: %v", errs, len(data)+12,
		switchStatus(ctl.Controller, hostileSwitch.Name).Connected)
	p.requireBelow(t, 100, 96<<20)
}

// sendFatDump answers the flow dump xid with parts+1 fat parts
// (fatFlowPart), the last without MORE, each flow with its own
// priority; owned gives them the appliance's cookie prefix. It returns
// the bytes written, short when the controller hung up.
func sendFatDump(t *testing.T, conn net.Conn, xid uint32, parts int, owned bool) int {
	t.Helper()
	if err := conn.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	size := 0
	for i := range parts + 1 {
		b := fatFlowPart(xid, i < parts)
		// The entry's priority is at offset 28 of the part, its cookie at 40.
		binary.BigEndian.PutUint16(b[28:], uint16(i+1))
		if owned {
			binary.BigEndian.PutUint64(b[40:], flows.CookiePrefix|0x7777)
		}
		if _, err := conn.Write(b); err != nil {
			t.Logf("the controller hung up after %d parts: %v", i, err)
			return size
		}
		size += len(b)
	}
	return size
}

// dumpHeapBound is the most a flow dump of a switch with few desired
// flows may take in the heap: twice its limit (the decoded entries, which
// are counted against it, and the garbage of the messages they came in
// until the collector runs).
var dumpHeapBound = uint64(2 * sdn.FlowReplyLimit(0).Bytes)

// TestFlowDumpDecodedCostCapped: the flow dump of a switch is capped by
// FlowReplyLimit, which was 8 MiB on the wire for a switch with few
// flows. A declared switch answers it with 128 parts of 64 KiB, each one
// flow entry (not owned) of 16,365 empty OXM fields: decoded, then copied
// by FromStats (Canonical), they took about 350 MiB of heap at once. The
// limit now counts what the entries take decoded (replyCost), and the
// switch is cut off well before. The heap is sampled while the controller
// works through the dump. Found by review (helper-53).
func TestFlowDumpDecodedCostCapped(t *testing.T) {
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
	size := sendFatDump(t, conn, dump.TransactionID(), 127, false)
	// The controller hangs up once the dump passes its limit.
	testsupport.Eventually(t, 30*time.Second, "the switch cut off", func() bool {
		return !switchStatus(ctl.Controller, hostileSwitch.Name).Connected
	})
	close(done)
	<-sampled
	t.Logf("flow dump of %.1f MiB on the wire", float64(size)/(1<<20))
	p.requireBelow(t, 100, dumpHeapBound)
}
