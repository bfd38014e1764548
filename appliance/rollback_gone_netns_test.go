package appliance

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// Coverage, on a real kernel: the interface executor (netlink)
// and a per-interface sysctl under the real /proc/sys take the same
// path as irq in the temp tree: an interface renamed away (the kernel
// drops its /proc/sys/net/ipv4/conf/IF too) holds the records of its
// mtu and rp_filter through a rollback, and once renamed back the next
// rollback puts the values from before back.
func TestRollbackHoldsARenamedLinkInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "sysctl", "ip") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "add", "sosr0", "type", "veth", "peer", "name", "sosr1")
	mtuBefore := cmdOut(t, "ip", "-o", "link", "show", "sosr0")
	rpBefore := cmdOut(t, "sysctl", "-n", "net.ipv4.conf.sosr0.rp_filter")
	rpWant := "2"
	if rpBefore == "2" {
		rpWant = "1"
	}
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	desired := []item.Item{
		{Kind: item.KindInterface, Key: "sosr0/mtu", Value: "9000"},
		sysctlItem("net.ipv4.conf.sosr0.rp_filter", rpWant),
	}
	mustApply(t, st, exs, mustPlan(t, st, exs, desired))

	cmdOut(t, "ip", "link", "set", "sosr0", "name", "sosr9")
	p, res, err := Rollback(ctx, st, exs, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback while sosr0 is renamed away:\n%s", p.Text())
	if len(res.Done) != 0 || strings.Count(p.Text(), "held, to be put back") != 2 {
		t.Errorf("done %+v; want nothing done and both items held", res.Done)
	}
	if recs, _ := st.Records(); len(recs) != 2 {
		t.Errorf("%d records after the rollback, want both kept", len(recs))
	}

	cmdOut(t, "ip", "link", "set", "sosr9", "name", "sosr0")
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if got := cmdOut(t, "ip", "-o", "link", "show", "sosr0"); got != mtuBefore {
		t.Errorf("link after the second rollback: %q, want %q", got, mtuBefore)
	}
	if got := cmdOut(t, "sysctl", "-n", "net.ipv4.conf.sosr0.rp_filter"); got != rpBefore {
		t.Errorf("rp_filter after the second rollback: %s, want %s", got, rpBefore)
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Errorf("records left: %+v", recs)
	}
}
