package sdn_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// slowClose is a listener whose Close takes a while, as a goroutine the
// scheduler runs late does on a loaded machine.
type slowClose struct{ *net.TCPListener }

func (s slowClose) Close() error {
	time.Sleep(300 * time.Millisecond)
	return s.TCPListener.Close()
}

// TestAcceptSwitchClosesBeforeItReturns: when the wait for a switch that
// dials in ends, AcceptSwitch closes the listener from a goroutine of
// context.AfterFunc, and returned without waiting for it. The one-shot
// plan then listened on the address again for the next switch, and under
// load found the old listener still bound ("bind: address already in
// use"; TestOneShotReachesBothKinds failed so in CI once its tests ran
// side by side). The listener is now closed when the call returns.
func TestAcceptSwitchClosesBeforeItReturns(t *testing.T) {
	for round := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err = sdn.AcceptSwitch(ctx, slowClose{ln.(*net.TCPListener)}, flows.Switch{Name: "never", DatapathID: 0xdead}, nil, sdn.ConnOptions{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: AcceptSwitch with no switch: %v", round, err)
		}
		again, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("round %d: listening again on %s as AcceptSwitch returned: %v", round, addr, err)
		}
		again.Close()
	}
}
