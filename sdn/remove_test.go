package sdn_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestConvergeOnceAfterRemoveOwnedFlows: BenchmarkConverge10k removes the
// owned flows with RemoveOwnedFlows and then converges the same connection
// again, each iteration. In f5d6b34 the removal shut the connection to
// convergences for its life, and every later one failed. Now only the
// controller's stop retires a connection (retire), and RemoveOwnedFlows
// leaves it usable. A fake switch answers dumps (empty) and barriers.
// Found by review (helper-56).
func TestConvergeOnceAfterRemoveOwnedFlows(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sw := bigSwitch(0x56b, 50)
	desired, err := flows.Compile(sw)
	if err != nil {
		t.Fatal(err)
	}
	swDone := make(chan struct{})
	go func() {
		defer close(swDone)
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := claimDatapath(conn, sw.DatapathID); err != nil {
			return
		}
		for {
			m, err := readOF(conn)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *ofp13.EchoRequest:
				_ = writeOF(conn, &ofp13.EchoReply{XID: m.XID, Data: m.Data})
			case *ofp13.BarrierRequest:
				_ = writeOF(conn, &ofp13.BarrierReply{XID: m.XID})
			default:
				if m.MessageType() == ofp13.TypeMultipartRequest {
					_ = writeOF(conn, &ofp13.FlowStatsReply{XID: m.TransactionID()})
				}
			}
		}
	}()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc, err := sdn.Handshake(ctx, raw, sdn.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sc.Close(); <-swDone }()
	if err := sc.RemoveOwnedFlows(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := sdn.ConvergeOnce(ctx, sc, desired)
	if err != nil || res.Sent != len(desired) {
		t.Errorf("converge after RemoveOwnedFlows on the same connection (as BenchmarkConverge10k does): sent %d of %d, %v", res.Sent, len(desired), err)
	}
}
