package sdn_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// answerStaleDump answers the flow dump xid with n stale owned flows.
func answerStaleDump(t *testing.T, conn net.Conn, xid uint32, n int) {
	t.Helper()
	const perPart = 1000
	if n == 0 {
		if err := writeOF(conn, &ofp13.FlowStatsReply{XID: xid}); err != nil {
			t.Fatal(err)
		}
		return
	}
	for i := 0; i < n; i += perPart {
		part := &ofp13.FlowStatsReply{XID: xid}
		if i+perPart < n {
			part.Flags = ofp13.MultipartMore
		}
		for j := i; j < min(i+perPart, n); j++ {
			part.Stats = append(part.Stats, ofp13.FlowStats{TableID: uint8(j / 60000), Priority: uint16(j%60000 + 1),
				Cookie: flows.CookiePrefix | 0x7777})
		}
		if err := writeOF(conn, part); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConvergenceOverALatentLink: a switch reached over a link with a 300
// ms round trip (or one whose barrier replies take 300 ms, as hardware
// switches committing to their tables do), with a 1 s keepalive. It is not
// busy: it answers every echo and barrier after the same 300 ms. The first
// batch sizing (be7cf6e) counted that latency as the switch's work and
// shrank the batches to 16 flow mods a round trip for good: 5,000 stale
// flows took some 240 round trips (one before be7cf6e). Now the work is
// what a batch took beyond the quickest batch's round trip, and the
// batches grow. Found by review (helper-54).
func TestConvergenceOverALatentLink(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: time.Second, ResyncInterval: -1}, hostileSwitch)
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	const stale = 5000
	answerStaleDump(t, conn, dump.TransactionID(), stale)

	const rtt = 300 * time.Millisecond
	type due struct {
		at time.Time
		m  ofp13.Message
	}
	out := make(chan due, 4096)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); conn.Close(); wg.Wait() }()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case d := <-out:
				time.Sleep(time.Until(d.at))
				if writeOF(conn, d.m) != nil {
					return
				}
			}
		}
	})
	var mu sync.Mutex
	barriers, mods := 0, 0
	wg.Go(func() {
		for {
			m, err := readOF(conn)
			if err != nil {
				return
			}
			var reply ofp13.Message
			switch m := m.(type) {
			case *ofp13.EchoRequest:
				reply = &ofp13.EchoReply{XID: m.XID, Data: m.Data}
			case *ofp13.BarrierRequest:
				mu.Lock()
				barriers++
				mu.Unlock()
				reply = &ofp13.BarrierReply{XID: m.XID}
			case *ofp13.FlowMod:
				mu.Lock()
				mods++
				mu.Unlock()
			}
			if reply != nil {
				select {
				case out <- due{time.Now().Add(rtt), reply}:
				case <-stop:
					return
				}
			}
		}
	})
	start := time.Now()
	ok := testsupport.Poll(30*time.Second, func() bool {
		return switchStatus(ctl.Controller, hostileSwitch.Name).Converges >= 1
	})
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	mu.Lock()
	t.Logf("after %v: convergences %d, last changes %d, last error %q; the switch got %d flow mods and %d barriers (%.1f flow mods a round trip)",
		time.Since(start).Round(time.Millisecond), st.Converges, st.LastChanges, st.LastError, mods, barriers,
		float64(mods)/float64(max(barriers, 1)))
	mu.Unlock()
	if !ok {
		t.Errorf("deleting %d stale flows over a link with a %v round trip did not finish within 30 s (one round trip before be7cf6e)", stale, rtt)
	}
}

// TestRemoveFlowsOnStopNotUndone: with RemoveFlowsOnStop, Run deletes
// every owned flow of each switch when it ends, while the sessions (and a
// convergence under way) live on until that delete's barrier. Once the
// writer was taken per batch (be7cf6e), the delete went between two
// batches, and the batches after it added owned flows back (146 here),
// which stayed on the switch after the controller stopped. Now Apply and
// RemoveOwnedFlows exclude each other, and a convergence ends at its next
// batch once the removal began. Found by review (helper-54).
func TestRemoveFlowsOnStopNotUndone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sw := bigSwitch(0xd54, 400)
	desired, err := flows.Compile(sw)
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, ResyncInterval: -1, RemoveFlowsOnStop: true,
		Switches: []flows.Switch{sw}})
	conn := declaredSession(t, ctl, ln.Addr().String(), sw)
	dump := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeMultipartRequest })
	answerStaleDump(t, conn, dump.TransactionID(), 0) // an empty switch: every desired flow is an add

	adds := 0
	b1 := readUntil(t, conn, func(m ofp13.Message) bool {
		if fm, ok := m.(*ofp13.FlowMod); ok && fm.Command == ofp13.FlowAdd {
			adds++
		}
		return m.MessageType() == ofp13.TypeBarrierRequest
	})
	t.Logf("%d desired flows; the first batch held %d adds", len(desired), adds)

	stopped := make(chan struct{})
	go func() { ctl.stop(); close(stopped) }()
	// The stop is under way while the first batch's barrier is
	// unanswered; then the switch answers it, and everything after.
	time.Sleep(200 * time.Millisecond)
	if err := writeOF(conn, &ofp13.BarrierReply{XID: b1.TransactionID()}); err != nil {
		t.Fatal(err)
	}
	deleted, after := false, 0
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		m, err := readOF(conn)
		if err != nil {
			break // the controller hung up
		}
		switch m := m.(type) {
		case *ofp13.FlowMod:
			if m.Command == ofp13.FlowDelete && m.TableID == ofp13.TableAll {
				deleted = true
			} else if m.Command == ofp13.FlowAdd && deleted {
				after++
			}
		case *ofp13.BarrierRequest:
			_ = writeOF(conn, &ofp13.BarrierReply{XID: m.XID})
		}
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not stop within 30 s")
	}
	if !deleted {
		t.Fatal("the stopping controller sent no delete of its owned flows")
	}
	if after > 0 {
		t.Errorf("after RemoveFlowsOnStop's delete of every owned flow, the stopping controller sent %d flow adds: they stay on the switch", after)
	}
}

// TestRemoveFlowsOnStopDuringAnUnansweredBarrier: a convergence waits for
// the barrier after its first batch, which the switch does not answer,
// though it answers echoes; the controller stops with RemoveFlowsOnStop.
// The removal waits for the convergence to end (TestRemoveFlowsOnStopNotUndone),
// and must not wait for its barrier: before, it waited until the
// convergence's deadline (ConvergeTimeout, 2 minutes by default). Now the
// removal ends the convergence's waits at once, and its own delete and
// barrier go.
func TestRemoveFlowsOnStopDuringAnUnansweredBarrier(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sw := bigSwitch(0xd56, 400)
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, ResyncInterval: -1, RemoveFlowsOnStop: true,
		Switches: []flows.Switch{sw}})
	conn := declaredSession(t, ctl, ln.Addr().String(), sw)
	dump := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeMultipartRequest })
	answerStaleDump(t, conn, dump.TransactionID(), 0)
	readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeBarrierRequest })

	stopped := make(chan struct{})
	start := time.Now()
	go func() { ctl.stop(); close(stopped) }()
	// Echoes answered; barriers only once the delete of every owned flow
	// came.
	deleted := false
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		m, err := readOF(conn)
		if err != nil {
			break // the controller hung up
		}
		switch m := m.(type) {
		case *ofp13.EchoRequest:
			_ = writeOF(conn, &ofp13.EchoReply{XID: m.XID, Data: m.Data})
		case *ofp13.FlowMod:
			deleted = deleted || m.Command == ofp13.FlowDelete && m.TableID == ofp13.TableAll
		case *ofp13.BarrierRequest:
			if deleted {
				_ = writeOF(conn, &ofp13.BarrierReply{XID: m.XID})
			}
		}
	}
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the controller did not stop within 20 s of a stop during an unanswered barrier")
	}
	t.Logf("stopped %v after the stop began; delete of the owned flows sent: %v", time.Since(start).Round(time.Millisecond), deleted)
	if !deleted {
		t.Error("the stopping controller sent no delete of its owned flows")
	}
}

// TestRoleStatusRightAfterRoleReply: with roles on, the controller asks
// for MASTER with generation 7; the switch grants it and, at once, another
// controller takes MASTER with generation 8, so the switch sends this one
// a ROLE_STATUS (SLAVE, generation 8) right behind the ROLE_REPLY. The
// reader handles the status before ensureRole, woken by the reply, stores
// the role it got. Before, the reply's MASTER overwrote the status's
// SLAVE, and the controller went on as master of a switch that made it
// slave, sending flow mods the switch refused, until its election
// changed. Now a reply of an older generation than the role recorded
// leaves it (setSessionRole). Found by review (helper-54); older than
// this session's changes.
func TestRoleStatusRightAfterRoleReply(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: 2 * time.Second, ResyncInterval: -1, RetryInterval: 500 * time.Millisecond,
		Roles: true, Switches: []flows.Switch{hostileSwitch}})
	if err := ctl.SetRole(ofp13.RoleMaster, 7); err != nil {
		t.Fatal(err)
	}
	conn := declaredSession(t, ctl, ln.Addr().String(), hostileSwitch)
	rq := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeRoleRequest }).(*ofp13.RoleRequest)
	if rq.Role != ofp13.RoleMaster || rq.GenerationID != 7 {
		t.Fatalf("role request %s %d", rq.Role, rq.GenerationID)
	}
	reply, err := (&ofp13.RoleReply{XID: rq.XID, Role: ofp13.RoleMaster, GenerationID: 7}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	status, err := (&ofp13.RoleStatus{Role: ofp13.RoleSlave, Reason: ofp13.RoleReasonMasterRequest, GenerationID: 8}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(append(reply, status...)); err != nil {
		t.Fatal(err)
	}
	// From now on this controller is SLAVE on the switch, whose
	// generation is 8: it answers as a switch does.
	fromSlave, roleRequests := 0, 0
	deadline := time.Now().Add(5 * time.Second)
	if err := conn.SetReadDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := readOF(conn)
		if err != nil {
			break
		}
		var r ofp13.Message
		switch m := m.(type) {
		case *ofp13.EchoRequest:
			r = &ofp13.EchoReply{XID: m.XID, Data: m.Data}
		case *ofp13.BarrierRequest:
			r = &ofp13.BarrierReply{XID: m.XID}
		case *ofp13.FlowStatsRequest:
			r = &ofp13.FlowStatsReply{XID: m.XID}
		case *ofp13.FlowMod:
			fromSlave++
			r = &ofp13.Error{XID: m.XID, Type: ofp13.ErrorTypeBadRequest, Code: 10} // OFPBRC_IS_SLAVE
		case *ofp13.RoleRequest:
			roleRequests++
			switch {
			case m.Role == ofp13.RoleMaster && m.GenerationID < 8:
				r = &ofp13.Error{XID: m.XID, Type: ofp13.ErrorTypeRoleRequestFailed, Code: ofp13.RoleRequestFailedStale}
			case m.Role == ofp13.RoleMaster:
				r = &ofp13.RoleReply{XID: m.XID, Role: ofp13.RoleMaster, GenerationID: m.GenerationID}
			default:
				r = &ofp13.RoleReply{XID: m.XID, Role: ofp13.RoleSlave, GenerationID: 8}
			}
		}
		if r != nil {
			if err := writeOF(conn, r); err != nil {
				break
			}
		}
	}
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	t.Logf("in 5 s after the ROLE_STATUS: %d flow mods sent as slave, %d role requests; status role %q generation %d, %d convergences, flow errors %d",
		fromSlave, roleRequests, st.Role, st.RoleGeneration, st.Converges, len(st.FlowErrors))
	if fromSlave > 0 {
		t.Errorf("the switch made this controller SLAVE (ROLE_STATUS, generation 8), yet it sent %d flow mods in 5 s as if master", fromSlave)
	}
}

// TestUndeclaredDatapathRefusalsLogBounded: anyone who reaches the
// listener can finish the handshake naming a datapath id nobody declared
// (a features reply is all it takes). Each such refusal was logged at
// Warn, a line per connection; now they are logged as refusals before a
// datapath id are, at most once a second (refuseAnonymous). Found by
// review (helper-54).
func TestUndeclaredDatapathRefusalsLogBounded(t *testing.T) {
	ctl, ln, before := refusingController(t)
	start := time.Now()
	const n = 300
	for i := range n {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := claimDatapath(c, 0xbad0000+uint64(i)); err != nil {
			t.Fatal(fmt.Errorf("connection %d: %w", i, err))
		}
		c.Close()
	}
	testsupport.Poll(10*time.Second, func() bool { return ctl.Status().Counters.Refused >= n })
	elapsed := time.Since(start)
	lines := strings.Count(ctl.logs.String(), `msg="refusing switch" `) - before
	t.Logf("%d handshakes naming undeclared datapath ids in %v: %d refusals counted, %d \"refusing switch\" lines",
		n, elapsed.Round(time.Millisecond), ctl.Status().Counters.Refused, lines)
	if bound := int(elapsed/time.Second) + 10; lines > bound {
		t.Errorf("%d refusal lines for %d anonymous connections that named undeclared datapath ids, over %v (a line a second would be %d)",
			lines, n, elapsed.Round(time.Millisecond), bound)
	}
}
