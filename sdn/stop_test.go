package sdn_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestRemoveFlowsOnStopNotUndoneWhileAnotherSwitchIsSlow: with
// RemoveFlowsOnStop and two switches, the sessions live on until every
// switch's removal ended (removeAllOwnedFlows waits for all, up to 10 s
// each, before stopSessions). Switch A's removal is done at once; switch
// B never answers the barrier of its own. In f5d6b34, A's session retried
// its convergence meanwhile (RetryInterval), and since Apply's choice
// between the free token and the removal was random, batches of adds went
// after A's delete of every owned flow and stayed on the switch (728 in
// 10 s). Now the stop retires each connection before its removal, and a
// retired connection's convergences end at once, whichever way that
// choice goes. Found by review (helper-56).
func TestRemoveFlowsOnStopNotUndoneWhileAnotherSwitchIsSlow(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	swA := bigSwitch(0x56c, 50)
	swA.Name = "sw-a"
	swB := bigSwitch(0x56d, 50)
	swB.Name = "sw-b"
	ctl := startController(t, sdn.Config{Listener: ln, ResyncInterval: -1, RemoveFlowsOnStop: true,
		RetryInterval: 20 * time.Millisecond, Switches: []flows.Switch{swA, swB}})
	connA := declaredSession(t, ctl, ln.Addr().String(), swA)
	connB := declaredSession(t, ctl, ln.Addr().String(), swB)

	var mu sync.Mutex
	deleted, after := false, 0
	firstBarrier := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Go(func() { // A: barriers answered only once its delete came
		_ = connA.SetReadDeadline(time.Now().Add(60 * time.Second))
		for {
			m, err := readOF(connA)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *ofp13.EchoRequest:
				_ = writeOF(connA, &ofp13.EchoReply{XID: m.XID, Data: m.Data})
			case *ofp13.FlowMod:
				mu.Lock()
				if m.Command == ofp13.FlowDelete && m.TableID == ofp13.TableAll {
					deleted = true
				} else if m.Command == ofp13.FlowAdd && deleted {
					after++
				}
				mu.Unlock()
			case *ofp13.BarrierRequest:
				once.Do(func() { close(firstBarrier) })
				mu.Lock()
				d := deleted
				mu.Unlock()
				if d {
					_ = writeOF(connA, &ofp13.BarrierReply{XID: m.XID})
				}
			default:
				if m.MessageType() == ofp13.TypeMultipartRequest {
					_ = writeOF(connA, &ofp13.FlowStatsReply{XID: m.TransactionID()})
				}
			}
		}
	})
	wg.Go(func() { // B: echoes and dumps answered, barriers never
		_ = connB.SetReadDeadline(time.Now().Add(60 * time.Second))
		for {
			m, err := readOF(connB)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *ofp13.EchoRequest:
				_ = writeOF(connB, &ofp13.EchoReply{XID: m.XID, Data: m.Data})
			default:
				if m.MessageType() == ofp13.TypeMultipartRequest {
					_ = writeOF(connB, &ofp13.FlowStatsReply{XID: m.TransactionID()})
				}
			}
		}
	})
	select {
	case <-firstBarrier:
	case <-time.After(30 * time.Second):
		t.Fatal("switch A's convergence sent no barrier")
	}
	ctl.stop()
	connA.Close()
	connB.Close()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if !deleted {
		t.Fatal("the stopping controller sent switch A no delete of its owned flows")
	}
	if after > 0 {
		t.Errorf("after RemoveFlowsOnStop's delete of every owned flow of switch A, the stopping controller sent it %d flow adds: they stay on the switch", after)
	}
}
