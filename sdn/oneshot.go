package sdn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
)

// ErrDialsIn is returned by OneShot for a switch that dials the controller
// when OneShot is not to wait for it.
var ErrDialsIn = errors.New("the switch dials the controller")

// OneShot reaches the switches of a controller node for a single plan or
// apply, when no controller holds their connections: a switch that listens
// (Connect "tcp:IP:PORT", OVS ptcp:) is dialed, one that dials the
// controller is awaited on Listen for up to Wait. Every connection is
// closed before the method that made it returns. Close releases the
// listener, which is shared between switches that dial in.
type OneShot struct {
	// Listen is the controller address switches dial (controller.listen).
	Listen string
	// Wait bounds the wait for each switch that dials in; zero means do
	// not wait and return ErrDialsIn.
	Wait    time.Duration
	Options ConnOptions
	// TLS, if set, is the controller's side of OpenFlow over TLS for
	// switches that dial in (see LoadTLS); each switch's own TLS and
	// allow-list settings are checked as the controller checks them.
	TLS *tls.Config
	// ListenFunc opens the listener on Listen; default net.Listen.
	ListenFunc func(network, address string) (net.Listener, error)

	ln net.Listener
}

// connect reaches sw, dialing it or accepting it on Listen.
func (o *OneShot) connect(ctx context.Context, sw flows.Switch) (*SwitchConn, error) {
	if sw.Connect != "" {
		return Dial(ctx, sw.Connect, o.Options)
	}
	if o.Wait <= 0 {
		return nil, ErrDialsIn
	}
	if o.ln == nil {
		listen := o.ListenFunc
		if listen == nil {
			listen = net.Listen
		}
		ln, err := listen("tcp", o.Listen)
		if err != nil {
			return nil, fmt.Errorf("controller listen %s: %w", o.Listen, err)
		}
		o.ln = ln
	}
	actx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	sc, err := AcceptSwitch(actx, o.ln, sw, o.TLS, o.Options)
	if err != nil {
		// AcceptSwitch closes the listener when its wait ends; the next
		// switch gets a new one.
		o.ln.Close()
		o.ln = nil
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("it did not connect to %s within %s: %w", o.Listen, o.Wait, err)
		}
		return nil, err
	}
	return sc, nil
}

// Plan diffs the flows sw must carry against those it carries, sending
// nothing.
func (o *OneShot) Plan(ctx context.Context, sw flows.Switch) (flows.Changes, error) {
	desired, err := flows.Compile(sw)
	if err != nil {
		return flows.Changes{}, err
	}
	sc, err := o.connect(ctx, sw)
	if err != nil {
		return flows.Changes{}, err
	}
	defer sc.Close()
	return Plan(ctx, sc, desired)
}

// Converge brings the owned flows of sw to the desired set, as
// ConvergeOnce does.
func (o *OneShot) Converge(ctx context.Context, sw flows.Switch) (Result, error) {
	desired, err := flows.Compile(sw)
	if err != nil {
		return Result{}, err
	}
	sc, err := o.connect(ctx, sw)
	if err != nil {
		return Result{}, err
	}
	defer sc.Close()
	return ConvergeOnce(ctx, sc, desired)
}

// Close releases the listener of switches that dial in.
func (o *OneShot) Close() error {
	if o.ln == nil {
		return nil
	}
	err := o.ln.Close()
	o.ln = nil
	return err
}
