package appliance

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// goneBetweenPlanAndApply: a plan is made while sosr0 exists; the
// link is renamed away before the plan is applied (a saved plan, a driver
// reload, udev renaming it); the apply fails. The link comes back, the
// next converge applies, and rollback must then put back the value from
// before the appliance first touched it. Before, the failed apply had
// recorded the fresh observation, "absent", as the previous value: the
// rollback planned a removal, which sysctl, interface and IRQ items
// refuse (they can only be set), and the appliance's value stayed for
// good. Now the apply refuses the change as gone (tuning.ErrGone) and
// records nothing. Found by review (helper-57).
func goneBetweenPlanAndApply(t *testing.T, it item.Item, read func() string) {
	ctx := context.Background()
	before := read()
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	desired := []item.Item{it}
	p := mustPlan(t, st, exs, desired)
	t.Logf("plan while sosr0 is there:\n%s", p.Text())

	cmdOut(t, "ip", "link", "set", "sosr0", "name", "sosr9")
	_, err := Apply(ctx, st, exs, p)
	t.Logf("apply while sosr0 is renamed away: %v", err)
	if !errors.Is(err, tuning.ErrGone) {
		t.Errorf("apply while sosr0 is renamed away: %v, want it refused as gone", err)
	}
	if rec, ok := recordOf(t, st, it.Kind, it.Key); ok {
		t.Errorf("record after the failed apply: previous %q present %v", rec.Previous, rec.PreviousPresent)
	}
	cmdOut(t, "ip", "link", "set", "sosr9", "name", "sosr0")

	if _, _, err := Converge(ctx, st, exs, desired, "node-a", "h2"); err != nil {
		t.Fatalf("converge once sosr0 is back: %v", err)
	}
	t.Logf("after converge: %s", read())
	rp, _, err := Rollback(ctx, st, exs, "node-a")
	t.Logf("rollback plan:\n%s", rp.Text())
	if err != nil {
		t.Errorf("rollback: %v", err)
	}
	if got := read(); got != before {
		t.Errorf("after rollback %q, want the value from before the appliance %q", got, before)
	}
}

func TestInterfaceGoneBetweenPlanAndApplyInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	cmdOut(t, "ip", "link", "add", "sosr0", "type", "veth", "peer", "name", "sosr1")
	goneBetweenPlanAndApply(t, item.Item{Kind: item.KindInterface, Key: "sosr0/mtu", Value: "9000"}, func() string {
		f := strings.Fields(cmdOut(t, "ip", "-o", "link", "show", "sosr0"))
		for i, w := range f {
			if w == "mtu" && i+1 < len(f) {
				return f[i+1]
			}
		}
		return ""
	})
}

func TestSysctlGoneBetweenPlanAndApplyInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "sysctl") {
		return
	}
	cmdOut(t, "ip", "link", "add", "sosr0", "type", "veth", "peer", "name", "sosr1")
	read := func() string { return cmdOut(t, "sysctl", "-n", "net.ipv4.conf.sosr0.rp_filter") }
	want := "2"
	if read() == "2" {
		want = "1"
	}
	goneBetweenPlanAndApply(t, sysctlItem("net.ipv4.conf.sosr0.rp_filter", want), read)
}
