package sdn_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// ofEvent is one message a roleProxy saw.
type ofEvent struct {
	at   time.Time
	ctl  string
	kind string // "flow_mod", or "role" for a role reply or role status
	role ofp13.ControllerRole
}

// roleProxy sits between a switch and the controllers: it forwards every
// message and records, per controller, the flow mods it sent and the roles
// the switch granted it, so a test can check from the wire (not from the
// controllers' own counters) that only the switch's master sent flow mods.
type roleProxy struct {
	mu     sync.Mutex
	events []ofEvent
}

// front listens where the switch connects for controller ctl and forwards
// to backend, a listener the controller serves on.
func (p *roleProxy) front(t *testing.T, inst *ovstest.Instance, ctl string, backend net.Listener) string {
	t.Helper()
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		for {
			sw, err := ln.Accept()
			if err != nil {
				return
			}
			var c net.Conn
			err = inst.InNamespace(func() (err error) {
				c, err = net.DialTimeout("tcp", backend.Addr().String(), 5*time.Second)
				return err
			})
			if err != nil {
				sw.Close()
				continue
			}
			wg.Go(func() { p.pump(ctl, sw, c, false) })
			wg.Go(func() { p.pump(ctl, c, sw, true) })
		}
	})
	t.Cleanup(func() { ln.Close() })
	return "tcp:" + ln.Addr().String()
}

func (p *roleProxy) pump(ctl string, from, to net.Conn, fromController bool) {
	defer from.Close()
	defer to.Close()
	rd := bufio.NewReader(from)
	for {
		hdr, err := rd.Peek(8)
		if err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(hdr[2:4]))
		if len(msg) < 8 {
			return
		}
		if _, err := io.ReadFull(rd, msg); err != nil {
			return
		}
		ev := ofEvent{at: time.Now(), ctl: ctl}
		if m, err := ofp13.Unmarshal(msg); err == nil {
			switch m := m.(type) {
			case *ofp13.FlowMod:
				if fromController {
					ev.kind = "flow_mod"
				}
			case *ofp13.RoleReply:
				if !fromController {
					ev.kind, ev.role = "role", m.Role
				}
			case *ofp13.RoleStatus:
				if !fromController {
					ev.kind, ev.role = "role", m.Role
				}
			}
		}
		if ev.kind != "" {
			p.mu.Lock()
			p.events = append(p.events, ev)
			p.mu.Unlock()
		}
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}

// flowMods counts the flow mods ctl sent since the index mark.
func (p *roleProxy) flowMods(ctl string, mark int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.events[mark:] {
		if e.ctl == ctl && e.kind == "flow_mod" {
			n++
		}
	}
	return n
}

func (p *roleProxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// checkOnlyMaster fails the test for any flow mod a controller sent while
// the switch's last word to it was not "master".
func (p *roleProxy) checkOnlyMaster(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	role := map[string]ofp13.ControllerRole{}
	total := 0
	for _, e := range p.events {
		switch e.kind {
		case "role":
			role[e.ctl] = e.role
		case "flow_mod":
			total++
			if role[e.ctl] != ofp13.RoleMaster {
				t.Errorf("%s sent a flow mod at %s while the switch had it %s", e.ctl, e.at.Format("15:04:05.000"), role[e.ctl])
			}
		}
	}
	t.Logf("%d flow mods on the wire, each from the switch's master of the moment", total)
}

func roleOf(c *sdn.Controller, name string) string { return switchStatus(c, name).Role }

// TestRolesWithOVS: two controllers share one Open vSwitch bridge. Both
// start slave and send nothing; the master converges the switch; a new
// master with a newer generation takes the switch from it (the switch
// tells the old one), converges with zero flow mods, and keeps fail-open
// working; the old master asking again with its stale generation is
// refused and stays slave. A recording proxy checks on the wire that no
// flow mod ever came from a controller the switch did not have as master.
func TestRolesWithOVS(t *testing.T) {
	ovstest.Require(t)
	inst := ovstest.Start(t)
	proxy := &roleProxy{}
	health := newHealthServer(t)
	sw := siteSwitch(0x5053000000000a01)
	agents := map[string]sdn.AgentHealth{"agent-a": {HTTP: health.addr()}, "agent-b": {HTTP: health.addr()}}
	ctl := map[string]*running{}
	var targets []string
	for _, name := range []string{"ctl-a", "ctl-b"} {
		ln, err := inst.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctl[name] = startController(t, sdn.Config{Listener: ln, Roles: true, Keepalive: time.Second,
			HealthInterval: 200 * time.Millisecond, RetryInterval: 200 * time.Millisecond, ResyncInterval: -1,
			Switches: []flows.Switch{sw}, Agents: agents})
		targets = append(targets, proxy.front(t, inst, name, ln))
	}
	a, b := ctl["ctl-a"], ctl["ctl-b"]
	br := inst.AddBridge(t, "br0", sw.DatapathID, targets...)
	for _, name := range []string{"ctl-a", "ctl-b"} {
		testsupport.Eventually(t, 20*time.Second, name+" to be slave on the switch", func() bool { return roleOf(ctl[name].Controller, sw.Name) == "slave" })
	}
	time.Sleep(300 * time.Millisecond)
	if n := proxy.flowMods("ctl-a", 0) + proxy.flowMods("ctl-b", 0); n != 0 {
		t.Fatalf("%d flow mods from slaves", n)
	}
	if owned, _ := ownedOnSwitch(t, br); len(owned) != 0 {
		t.Fatalf("slaves installed flows: %v", owned)
	}

	// ctl-a is elected.
	before := switchStatus(a.Controller, sw.Name).Converges
	if err := a.SetRole(ofp13.RoleMaster, 10); err != nil {
		t.Fatal(err)
	}
	st := waitConverged(t, a.Controller, sw.Name, before)
	if st.Role != "master" || st.RoleGeneration != 10 || st.LastChanges == 0 {
		t.Fatalf("ctl-a after election: %+v", st)
	}
	want := compile(t, sw)
	requireSameFlows(t, br, want)

	// ctl-b takes over with a newer generation while ctl-a still believes
	// it leads (cut off from etcd, its lease not yet expired).
	mark := proxy.mark()
	before = switchStatus(b.Controller, sw.Name).Converges
	took := time.Now()
	if err := b.SetRole(ofp13.RoleMaster, 11); err != nil {
		t.Fatal(err)
	}
	st = waitConverged(t, b.Controller, sw.Name, before)
	t.Logf("takeover converged %v after SetRole", time.Since(took).Round(time.Millisecond))
	if st.Role != "master" || st.LastChanges != 0 {
		t.Fatalf("ctl-b after takeover: %+v", st)
	}
	if n := proxy.flowMods("ctl-b", mark); n != 0 {
		t.Errorf("new master sent %d flow mods to a switch whose flows matched", n)
	}
	testsupport.Eventually(t, 10*time.Second, "the switch to tell ctl-a it is slave", func() bool { return roleOf(a.Controller, sw.Name) == "slave" })
	if n := a.Status().Counters.RoleStatus; n == 0 {
		t.Errorf("ctl-a counted no role status")
	}

	// ctl-a asks again with its old generation: stale.
	a.SetRole(ofp13.RoleSlave, 10)
	if err := a.SetRole(ofp13.RoleMaster, 10); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "ctl-a's stale master request to be refused", func() bool {
		return a.Status().Counters.RoleRefusals > 0
	})
	if r := roleOf(a.Controller, sw.Name); r != "slave" {
		t.Errorf("ctl-a is %q on the switch after a stale request", r)
	}
	if !strings.Contains(a.logs.String(), "switch refused this controller as master") {
		t.Errorf("the refusal is not logged")
	}
	if r := roleOf(b.Controller, sw.Name); r != "master" {
		t.Errorf("ctl-b is %q after ctl-a's stale request", r)
	}

	// Fail-open still works, from the new master alone.
	mark = proxy.mark()
	before = switchStatus(b.Controller, sw.Name).Converges
	health.up.Store(false)
	testsupport.Eventually(t, 20*time.Second, "the new master to withdraw the steering", func() bool {
		st := switchStatus(b.Controller, sw.Name)
		return st.Converges > before && len(st.Withdrawn) == 2
	})
	requireSameFlows(t, br, compile(t, sw, "agent-a", "agent-b"))
	if n := proxy.flowMods("ctl-a", mark); n != 0 {
		t.Errorf("the slave sent %d flow mods on fail-open", n)
	}
	if n := proxy.flowMods("ctl-b", mark); n == 0 {
		t.Errorf("the master sent no flow mods on fail-open")
	}
	health.up.Store(true)
	testsupport.Eventually(t, 20*time.Second, "the steering to come back", func() bool {
		return len(switchStatus(b.Controller, sw.Name).Withdrawn) == 0
	})
	requireSameFlows(t, br, want)
	proxy.checkOnlyMaster(t)
	if r := b.Role(); !r.Enabled || r.Role != "master" || r.Generation != 11 {
		t.Errorf("ctl-b role %+v", r)
	}
}
