package sdn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

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
	proxy := &ovstest.RecordingProxy{}
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
		targets = append(targets, proxy.Front(t, inst, name, ln.Addr().String()))
	}
	a, b := ctl["ctl-a"], ctl["ctl-b"]
	br := inst.AddBridge(t, "br0", sw.DatapathID, targets...)
	for _, name := range []string{"ctl-a", "ctl-b"} {
		testsupport.Eventually(t, 20*time.Second, name+" to be slave on the switch", func() bool { return roleOf(ctl[name].Controller, sw.Name) == "slave" })
	}
	time.Sleep(300 * time.Millisecond)
	if n := proxy.FlowMods("ctl-a", 0) + proxy.FlowMods("ctl-b", 0); n != 0 {
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
	mark := proxy.Mark()
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
	if n := proxy.FlowMods("ctl-b", mark); n != 0 {
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
	if e := switchStatus(a.Controller, sw.Name).LastError; !strings.Contains(e, "master refused") || !strings.Contains(e, "generation_base above") {
		t.Errorf("ctl-a's status of the switch after a stale request: %q, want the refusal and the way out", e)
	}
	if r := roleOf(b.Controller, sw.Name); r != "master" {
		t.Errorf("ctl-b is %q after ctl-a's stale request", r)
	}

	// Fail-open still works, from the new master alone.
	mark = proxy.Mark()
	before = switchStatus(b.Controller, sw.Name).Converges
	health.up.Store(false)
	testsupport.Eventually(t, 20*time.Second, "the new master to withdraw the steering", func() bool {
		st := switchStatus(b.Controller, sw.Name)
		return st.Converges > before && len(st.Withdrawn) == 2
	})
	requireSameFlows(t, br, compile(t, sw, "agent-a", "agent-b"))
	if n := proxy.FlowMods("ctl-a", mark); n != 0 {
		t.Errorf("the slave sent %d flow mods on fail-open", n)
	}
	if n := proxy.FlowMods("ctl-b", mark); n == 0 {
		t.Errorf("the master sent no flow mods on fail-open")
	}
	health.up.Store(true)
	testsupport.Eventually(t, 20*time.Second, "the steering to come back", func() bool {
		return len(switchStatus(b.Controller, sw.Name).Withdrawn) == 0
	})
	requireSameFlows(t, br, want)
	proxy.CheckOnlyMaster(t)
	if r := b.Role(); !r.Enabled || r.Role != "master" || r.Generation != 11 {
		t.Errorf("ctl-b role %+v", r)
	}
}
