package sdn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestRefusalsKeptWhenALaterBatchFails: a convergence sends its flow mods
// in batches, each followed by a barrier (Apply). Before, the changes the
// switch refused in the batches it had answered were dropped when a later
// barrier failed: the status listed no refused change and named only the
// barrier, and the flow mod error counter did not count them. And when
// every batch was answered, the status's last error joined every refusal,
// one line each: 600 lines for a switch that refused 600 changes. A
// declared switch lists 600 stale owned flows, refuses every delete of
// the first batch (256), answers its barrier, and leaves the second
// batch's barrier unanswered past the convergence's timeout. Now the 256
// refusals are counted and listed (20 and a count), and the last error
// names the timeout, how many changes were refused, and the first five.
func TestRefusalsKeptWhenALaterBatchFails(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: time.Minute, ConvergeTimeout: 3 * time.Second,
		ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	const stale = 600
	for _, part := range staleDump(dump.TransactionID(), stale) {
		if err := writeOF(conn, part); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	const first = 256 // firstBatchMods
	refuseFlowMods(t, conn, first, nil)
	barrier := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeBarrierRequest })
	if err := writeOF(conn, &ofp13.BarrierReply{XID: barrier.TransactionID()}); err != nil {
		t.Fatal(err)
	}
	// The second batch, and its barrier left unanswered.
	mods := 0
	readUntil(t, conn, func(m ofp13.Message) bool {
		if m.MessageType() == ofp13.TypeFlowMod {
			mods++
		}
		return m.MessageType() == ofp13.TypeBarrierRequest
	})
	var st sdn.SwitchStatus
	testsupport.Eventually(t, 20*time.Second, "the convergence to fail", func() bool {
		st = switchStatus(ctl.Controller, hostileSwitch.Name)
		return st.LastError != ""
	})
	t.Logf("second batch: %d flow mods; last error:\n%s\nflow errors listed: %d, last %q; counted %d",
		mods, st.LastError, len(st.FlowErrors), st.FlowErrors[len(st.FlowErrors)-1:], ctl.Controller.Status().Counters.FlowModErrors)
	if n := ctl.Controller.Status().Counters.FlowModErrors; n != first {
		t.Errorf("flow mod errors counted %d, want the first batch's %d", n, first)
	}
	if len(st.FlowErrors) != 21 || !strings.Contains(st.FlowErrors[20], "and 236 more") {
		t.Errorf("status lists %d refused changes (want 20 and a count): %q", len(st.FlowErrors), st.FlowErrors)
	}
	for _, want := range []string{"barrier after", "switch refused 256 of", "... and 251 more"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("last error does not say %q:\n%s", want, st.LastError)
		}
	}
	if lines := strings.Count(st.LastError, "\n") + 1; lines > 10 {
		t.Errorf("last error is %d lines long", lines)
	}
}
