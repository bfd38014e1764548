package sdn_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestPlanWaitsForTheConvergenceUnderWay: a convergence sends its flow
// mods in batches, a barrier after each (Apply). Before, a plan taken on
// a running node (PlanSwitch) dumped the switch's flows at once, between
// two batches, and showed the switch half-converged: the changes of the
// batches still to go as to do, although they were on their way. A
// declared switch lists 600 stale owned flows and leaves the first
// batch's barrier unanswered while a plan is asked for. Now the plan's
// dump goes only after the convergence's last barrier was answered, and
// the plan shows what the switch carries then.
func TestPlanWaitsForTheConvergenceUnderWay(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: time.Minute, ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	for _, part := range staleDump(dump.TransactionID(), 600) {
		if err := writeOF(conn, part); err != nil {
			t.Fatal(err)
		}
	}
	isBarrier := func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeBarrierRequest }
	barrier := readUntil(t, conn, isBarrier)

	type planned struct {
		changes flows.Changes
		err     error
	}
	done := make(chan planned, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		changes, _, err := ctl.Controller.PlanSwitch(ctx, hostileSwitch)
		done <- planned{changes, err}
	}()
	// While the first batch's barrier is unanswered, nothing more comes.
	if err := conn.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	m, err := readOF(conn)
	var ne net.Error
	switch {
	case err == nil && m.MessageType() == ofp13.TypeMultipartRequest:
		t.Fatal("the plan dumped the switch between two batches of the convergence under way")
	case err == nil:
		t.Fatalf("the controller sent %v while its batch's barrier was unanswered", m.MessageType())
	case !errors.As(err, &ne) || !ne.Timeout():
		t.Fatalf("reading from the controller: %v", err)
	}
	// The rest of the convergence, then the plan's dump.
	for {
		if err := writeOF(conn, &ofp13.BarrierReply{XID: barrier.TransactionID()}); err != nil {
			t.Fatal(err)
		}
		m := readUntil(t, conn, func(m ofp13.Message) bool {
			return isBarrier(m) || m.MessageType() == ofp13.TypeMultipartRequest
		})
		if !isBarrier(m) {
			dump = m
			break
		}
		barrier = m
	}
	// The switch as the convergence left it: the desired flows alone.
	desired, err := flows.Compile(hostileSwitch)
	if err != nil {
		t.Fatal(err)
	}
	reply := &ofp13.FlowStatsReply{XID: dump.TransactionID()}
	for _, f := range desired {
		reply.Stats = append(reply.Stats, ofp13.FlowStats{TableID: f.Table, Priority: f.Priority, Cookie: f.Cookie,
			Match: f.Match, Instructions: f.Instructions, IdleTimeout: f.IdleTimeout, HardTimeout: f.HardTimeout, Flags: f.Flags})
	}
	if err := writeOF(conn, reply); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-done:
		if p.err != nil || !p.changes.Empty() {
			t.Fatalf("plan after the convergence: %v\n%s", p.err, p.changes)
		}
	case <-ctx.Done():
		t.Fatal("no plan")
	}
}
