package sdn_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestFlowErrorsAttributedAcrossBatches: 2,000 stale flows are deleted in
// several batches; the switch refuses the delete of every flow whose
// priority is a multiple of 200 (the one at 1,000 is a modify,
// hostileSwitch's own flow), each ERROR sent late, just before the reply
// to the barrier that follows its batch. Every refusal names the flow it
// was for, whatever batch it was in. Written by review (helper-54).
func TestFlowErrorsAttributedAcrossBatches(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	const stale = 2000
	answerStaleDump(t, conn, dump.TransactionID(), stale)
	var held []ofp13.Message
	barriers := 0
	var mu sync.Mutex
	refused := map[string]bool{}
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			m, err := readOF(conn)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *ofp13.FlowMod:
				if m.Command == ofp13.FlowDeleteStrict && m.Priority%200 == 0 {
					held = append(held, &ofp13.Error{XID: m.XID, Type: ofp13.ErrorTypeBadRequest, Code: 6, Data: []byte("refused")})
					mu.Lock()
					refused[fmt.Sprintf("priority=%d ", m.Priority)] = true
					mu.Unlock()
				}
			case *ofp13.BarrierRequest:
				mu.Lock()
				barriers++
				mu.Unlock()
				for _, e := range held {
					_ = writeOF(conn, e)
				}
				held = nil
				_ = writeOF(conn, &ofp13.BarrierReply{XID: m.XID})
			case *ofp13.EchoRequest:
				_ = writeOF(conn, &ofp13.EchoReply{XID: m.XID, Data: m.Data})
			}
		}
	}()
	testsupport.Eventually(t, 20*time.Second, "the convergence", func() bool {
		return switchStatus(ctl.Controller, hostileSwitch.Name).Converges > 0
	})
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	t.Logf("%d flow errors listed, counter %d; last error %q", len(st.FlowErrors), ctl.Status().Counters.FlowModErrors, st.LastError)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the switch refused %d deletes over %d barriers", len(refused), barriers)
	if len(st.FlowErrors) != len(refused) {
		t.Errorf("%d flow errors listed, the switch refused %d", len(st.FlowErrors), len(refused))
	}
	for _, fe := range st.FlowErrors {
		p := fe[strings.Index(fe, "priority="):]
		p = p[:strings.Index(p, " ")+1]
		if !strings.HasPrefix(fe, "switch refused - ") || !refused[p] {
			t.Errorf("flow error %q names a change the switch did not refuse", fe)
		}
	}
}
