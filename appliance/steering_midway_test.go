package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// failingSteering is the real steering executor (every method:
// Validate and Restorable too) whose table step fails for one mark, as a
// netlink error would, and which looks after each step at where a packet
// the live table marks is routed.
type failingSteering struct {
	*tuning.Steering
	failMark string
	after    func(step string)
}

func (s failingSteering) Apply(ctx context.Context, it item.Item) error {
	var err error
	if it.Key == item.SteeringKeyNftables && strings.Contains(it.Value, `"mark":`+s.failMark+`,`) {
		err = errors.New("injected: nftables write failed")
	} else {
		err = s.Steering.Apply(ctx, it)
	}
	s.after("~ " + it.Key)
	return err
}

func (s failingSteering) Remove(ctx context.Context, it item.Item) error {
	err := s.Steering.Remove(ctx, it)
	s.after("- " + it.Key)
	return err
}

// liveRouteOf routes a packet of a client of whitelist w (10.1.0.5
// to 10.2.0.10, in on eth1) with the mark the live ip table sets.
func liveRouteOf() string {
	out, err := exec.Command("nft", "list", "table", "ip", tuning.SteeringTable).CombinedOutput()
	if err != nil {
		return "no table"
	}
	m := regexp.MustCompile(`mark set (0x[0-9a-f]+)`).FindStringSubmatch(string(out))
	if m == nil {
		return "table sets no mark"
	}
	r, err := exec.Command("ip", "route", "get", "10.2.0.10", "from", "10.1.0.5", "iif", "eth1", "mark", m[1]).CombinedOutput()
	return fmt.Sprintf("mark %s: %s (%v)", m[1], strings.Join(strings.Fields(string(r)), " "), err)
}

// TestSteeringMoveFailingMidwayKeepsRoutingInNetns: a reload
// that moves the three numbers fails at its last steering step (the
// table write): the route and rule of the new numbers were made. After
// every step of the apply and of the daemon's putting back, a packet the
// live table marks must be routed locally; afterwards only the old
// numbers' rule and route are left, the status says the reload failed,
// and a rollback leaves nothing. Written by review (helper-80); it
// passed.
func TestSteeringMoveFailingMidwayKeepsRoutingInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	var bad, steps []string
	execs := n.daemonExecutors()
	execs[item.KindSteering] = failingSteering{Steering: tuning.NewSteering(), failMark: "21328", after: func(step string) {
		got := liveRouteOf()
		steps = append(steps, step+": "+got)
		if got != "no table" && !strings.Contains(got, "local 10.2.0.10") {
			bad = append(bad, step+": "+got)
		}
	}}
	edit := reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}
	writeFile(t, n.cfgPath, n.config(edit))
	off := ""
	d, err := NewDaemon(Options{
		ConfigPath: n.cfgPath, Node: "host1", StatePath: n.dir + "/state.db",
		ControlSocket: n.dir + "/control.sock", MetricsListen: &off, Root: n.root,
		Executors: execs, Settle: 50 * time.Millisecond, DriftInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(n.logs, nil)),
	})
	testsupport.RequireNoError(t, err)
	stopDaemon := runDaemonUntil(t, d, n.logs, func() string { return "steps:\n" + strings.Join(steps, "\n") })
	rules := func() string { return steeringRules(t) }
	routes := func() string { return steeringRoutes(t) }
	testsupport.Eventually(t, 15*time.Second, "start-up on the default numbers", func() bool {
		return d.Status().Serial == 1 && strings.Contains(rules(), "21327:\tfrom all fwmark 0x534f lookup 21327 proto 83")
	})
	edit.agentExtra = `steering_mark = "0x5350"
    steering_table = 200
    steering_priority = 100`
	writeFile(t, n.cfgPath, n.config(edit))
	testsupport.Eventually(t, 15*time.Second, "the reload failed", func() bool {
		st := d.Status()
		return st.LastReload != nil && strings.HasPrefix(st.LastReload.Result, "failed")
	})
	stopDaemon() // the putting back is done under the daemon's lock
	t.Logf("steps:\n%s", strings.Join(steps, "\n"))
	if len(bad) > 0 {
		t.Errorf("marked packets not routed locally after:\n%s", strings.Join(bad, "\n"))
	}
	if r := rules(); strings.Count(r, "proto 83") != 1 || !strings.Contains(r, "21327:\tfrom all fwmark 0x534f lookup 21327 proto 83") {
		t.Errorf("rules after the failed reload:\n%s", r)
	}
	if r := routes(); strings.Contains(r, "table 200") || !strings.Contains(r, "table 21327") {
		t.Errorf("routes after the failed reload:\n%s", r)
	}
	if _, _, err := Rollback(context.Background(), openTestStore(t, n.dir+"/state.db"), n.daemonExecutors(), "host1"); err != nil {
		t.Fatal(err)
	}
	if r := rules(); strings.Contains(r, "fwmark") {
		t.Errorf("rules after rollback:\n%s", r)
	}
	if r := routes(); r != "" {
		t.Errorf("routes after rollback:\n%s", r)
	}
}
