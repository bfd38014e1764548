package sdn_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestConvergeOnce is the path `sosappliance apply` takes: dial a switch
// that listens with ptcp:, plan, converge, and converge again.
func TestConvergeOnce(t *testing.T) {
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	br := inst.AddBridge(t, "br1", 0xa1, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	const foreign = "cookie=0x1234,priority=2000,tcp,nw_dst=10.10.1.20,tp_dst=5201,actions=drop"
	if err := br.AddFlow(foreign); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sc *sdn.SwitchConn
	var err error
	testsupport.Eventually(t, 20*time.Second, "the bridge to listen", func() bool {
		sc, err = sdn.Dial(ctx, fmt.Sprintf("tcp:127.0.0.1:%d", port), sdn.ConnOptions{Dial: inst.DialContext})
		return err == nil
	})
	defer sc.Close()
	if sc.DatapathID() != 0xa1 {
		t.Fatalf("datapath id %#x", sc.DatapathID())
	}
	if rtt, err := sc.Echo(ctx); err != nil {
		t.Fatalf("echo: %v", err)
	} else {
		t.Logf("echo round trip %v", rtt)
	}
	sw := siteSwitch(0xa1)
	desired, err := flows.Compile(sw)
	if err != nil {
		t.Fatal(err)
	}

	plan, err := sdn.Plan(ctx, sc, desired)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Add) != len(desired) || len(plan.Modify)+len(plan.Delete) != 0 {
		t.Fatalf("plan for an empty switch:\n%s", plan)
	}
	if owned, _ := ownedOnSwitch(t, br); len(owned) != 0 {
		t.Fatalf("Plan changed the switch: %v", owned)
	}

	res, err := sdn.ConvergeOnce(ctx, sc, desired)
	if err != nil || res.Sent != len(desired) {
		t.Fatalf("first convergence: sent %d, %v", res.Sent, err)
	}
	all := requireSameFlows(t, br, desired)
	if _, ok := all["table=0,priority=2000,tcp,nw_dst=10.10.1.20,tp_dst=5201"]; !ok {
		t.Fatalf("the foreign flow is gone: %v", all)
	}

	res, err = sdn.ConvergeOnce(ctx, sc, desired)
	if err != nil || res.Sent != 0 || !res.Changes.Empty() {
		t.Fatalf("converging an unchanged switch sent %d flow mods: %v\n%s", res.Sent, err, res.Changes)
	}

	// Withdraw one whitelist: only its flows go.
	sw.Steers = sw.Steers[:1]
	fewer, _ := flows.Compile(sw)
	res, err = sdn.ConvergeOnce(ctx, sc, fewer)
	if err != nil || len(res.Changes.Delete) != 2 || res.Sent != 2 {
		t.Fatalf("withdrawing ssh: %v\n%s", err, res.Changes)
	}
	requireSameFlows(t, br, fewer)

	// A full table: the switch refuses, and the refusal names the flow.
	if _, err := inst.Vsctl("--timeout=20", "--", "--id=@t", "create", "flow_table", "flow_limit="+fmt.Sprint(len(fewer)),
		"--", "set", "bridge", "br1", "flow_tables:0=@t"); err != nil {
		t.Fatal(err)
	}
	res, err = sdn.ConvergeOnce(ctx, sc, desired)
	var fe *sdn.FlowError
	if !errors.As(err, &fe) || len(res.Failed) != 2 {
		t.Fatalf("over the flow limit: %v, failed %v", err, res.Failed)
	}
	if fe.Err.Type != ofp13.ErrorTypeFlowModFailed || fe.Err.Code != ofp13.FlowModFailedTableFull ||
		fe.Change.Op != flows.OpAdd || !strings.Contains(err.Error(), "OFPFMFC_TABLE_FULL") ||
		!strings.Contains(err.Error(), "priority=2000,tcp,") {
		t.Fatalf("refusal %q does not name the error and the offending flow", err)
	}
	t.Logf("switch refusal as reported: %v", err)
}

// TestHandshakeRefusesOpenFlow10 checks version negotiation against a
// switch that speaks OpenFlow 1.0 only.
func TestHandshakeRefusesOpenFlow10(t *testing.T) {
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	inst.AddBridge(t, "br10", 0xa2, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	if _, err := inst.Vsctl("--timeout=20", "set", "bridge", "br10", "protocols=OpenFlow10"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dialErr error
	testsupport.Eventually(t, 20*time.Second, "a handshake answer", func() bool {
		_, dialErr = sdn.Dial(ctx, fmt.Sprintf("tcp:127.0.0.1:%d", port), sdn.ConnOptions{Dial: inst.DialContext})
		return dialErr != nil && strings.Contains(dialErr.Error(), "not 1.3")
	})
	t.Logf("refused as expected: %v", dialErr)
}

// TestRemoveFlowsOnStop: with the option set, stopping the controller
// deletes the owned flows and only those.
func TestRemoveFlowsOnStop(t *testing.T) {
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	br := inst.AddBridge(t, "brr", 0xf1, "tcp:"+ln.Addr().String())
	if err := br.AddFlow("cookie=0x99,priority=7,arp,actions=NORMAL"); err != nil {
		t.Fatal(err)
	}
	sw := siteSwitch(0xf1)
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Second,
		RemoveFlowsOnStop: true, Switches: []flows.Switch{sw}})
	waitConverged(t, ctl.Controller, sw.Name, 0)
	requireSameFlows(t, br, compile(t, sw))
	ctl.stop()
	owned, all := ownedOnSwitch(t, br)
	if len(owned) != 0 || len(all) != 1 || all["table=0,priority=7,arp"].Cookie != 0x99 {
		t.Fatalf("after stop: owned %v, all %v", owned, all)
	}
}

// TestAcceptSwitch waits for one switch among several that dial in, the
// way `apply` reaches a switch that connects to the controller address.
func TestAcceptSwitch(t *testing.T) {
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	inst.AddBridge(t, "brx", 0x0e, "tcp:"+ln.Addr().String())
	inst.AddBridge(t, "bry", 0x0f, "tcp:"+ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, err := sdn.AcceptSwitch(ctx, ln, flows.Switch{Name: "bry", DatapathID: 0x0f,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, nil, sdn.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if sc.DatapathID() != 0x0f || sc.Features().NTables == 0 {
		t.Fatalf("accepted %+v", sc.Features())
	}
	if owned, err := sc.OwnedFlows(ctx); err != nil || len(owned) != 0 {
		t.Fatalf("owned flows on a fresh bridge: %v, %v", owned, err)
	}
}

// TestOneShotReachesBothKinds plans and converges, the way `plan` and
// `apply` do without a daemon, a switch that listens and one that dials
// in, and names the switch it is told not to wait for.
func TestOneShotReachesBothKinds(t *testing.T) {
	t.Parallel() // its own controller (and Open vSwitch, in a namespace of its own); mostly waiting (see the Makefile's -parallel)
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	ctlPort := inst.FreePort(t)
	listening := inst.AddBridge(t, ovstest.UniqueName("bl"), 0xb1, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	dialing := inst.AddBridge(t, ovstest.UniqueName("bd"), 0xb2, fmt.Sprintf("tcp:127.0.0.1:%d", ctlPort))
	swL, swD := siteSwitch(0xb1), siteSwitch(0xb2)
	swL.Name, swL.Connect = "listens", fmt.Sprintf("tcp:127.0.0.1:%d", port)
	swD.Name = "dials-in"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	o := &sdn.OneShot{Listen: fmt.Sprintf("127.0.0.1:%d", ctlPort), Options: sdn.ConnOptions{Dial: inst.DialContext}, ListenFunc: inst.Listen}
	defer o.Close()
	if _, err := o.Plan(ctx, swD); !errors.Is(err, sdn.ErrDialsIn) {
		t.Fatalf("without a wait, a switch that dials in: %v", err)
	}
	var changes flows.Changes
	var err error
	testsupport.Eventually(t, 20*time.Second, "the bridge to listen", func() bool {
		changes, err = o.Plan(ctx, swL)
		return err == nil
	})
	if want := compile(t, swL); len(changes.Add) != len(want) || changes.Len() != len(want) {
		t.Fatalf("plan for an empty switch:\n%s", changes)
	}

	o.Wait = 20 * time.Second
	for _, c := range []struct {
		sw flows.Switch
		br *ovstest.Bridge
	}{{swL, listening}, {swD, dialing}} {
		res, err := o.Converge(ctx, c.sw)
		if err != nil || res.Sent != len(compile(t, c.sw)) {
			t.Fatalf("converge %s: sent %d, %v", c.sw.Name, res.Sent, err)
		}
		requireSameFlows(t, c.br, compile(t, c.sw))
		if changes, err := o.Plan(ctx, c.sw); err != nil || !changes.Empty() {
			t.Fatalf("plan of converged %s: %v\n%s", c.sw.Name, err, changes)
		}
	}

	other := siteSwitch(0xb3)
	other.Name = "never"
	o.Wait = 500 * time.Millisecond
	if _, err := o.Plan(ctx, other); err == nil || !strings.Contains(err.Error(), "did not connect") {
		t.Fatalf("a switch that never dials in: %v", err)
	}
	// The listener closed with the wait; the next switch gets a new one.
	o.Wait = 20 * time.Second
	if changes, err := o.Plan(ctx, swD); err != nil || !changes.Empty() {
		t.Fatalf("plan after a timed-out wait: %v\n%s", err, changes)
	}
}

// TestOneShotAcceptNotStalledBySilentConnections: AcceptSwitch (a one-shot
// plan's or apply's wait for a switch that dials in) used to run the
// handshakes of the connections it accepted one after the other, each
// for up to HandshakeTimeout, so a host reaching the listener (any host,
// without an allow list) that opened a few silent connections first kept
// the real switch, queued behind them, from being accepted within the
// wait (an independent review's test). Handshakes run side by side now,
// the oldest given up when maxAcceptHandshakes are in flight.
func TestOneShotAcceptNotStalledBySilentConnections(t *testing.T) {
	for _, silent := range []int{4, 40} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		const dpid = 0x5e60
		sw := siteSwitch(dpid)
		var quiet []net.Conn
		for range silent {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			quiet = append(quiet, c)
		}
		stop := make(chan struct{})
		go func() {
			time.Sleep(100 * time.Millisecond)
			if f, err := dialFakeSwitch(ln.Addr().String(), dpid, stop); err == nil {
				<-stop
				f.conn.Close()
			}
		}()
		// Each silent connection would hold a serial accept for the whole
		// HandshakeTimeout, a minute: the 4 of the first round alone keep
		// the switch out for 4 minutes, far past the wait of 30 s, which
		// side-by-side handshakes leave all but unused however loaded the
		// machine.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		sc, err := sdn.AcceptSwitch(ctx, ln, sw, nil, sdn.ConnOptions{HandshakeTimeout: time.Minute, Keepalive: time.Second})
		cancel()
		if err != nil {
			t.Errorf("%d silent connections first: the real switch, 100 ms behind them, was not accepted within 30 s: %v (after %v)", silent, err, time.Since(start))
		} else {
			t.Logf("%d silent connections first: the switch accepted after %v", silent, time.Since(start).Round(time.Millisecond))
			sc.Close()
		}
		close(stop)
		for _, c := range quiet {
			c.Close()
		}
		ln.Close()
	}
}
