package desired

import (
	"os"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/host/item"
)

// TestSteeringSysctlSetAlsoByTuningIsOneItem: steering needs
// net.ipv4.conf.IF.rp_filter = 2 on the agent interface. Compile refuses a
// tuning that sets it to another value, but when the tuning sets the same
// value it appends the steering item anyway, so the node's desired state
// holds the item twice (one ID, two records): plan.Diff then emits two
// changes for one ID, and a saved plan with them is refused on read
// ("change N: sysctl/... twice").
// Found by review (helper-70): before, the item was desired twice and the
// saved plan could not be read back.
func TestSteeringSysctlSetAlsoByTuningIsOneItem(t *testing.T) {
	src, err := os.ReadFile("../../examples/fasterdata.hcl")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), `"net.core.rmem_max" = "268435456"`,
		`"net.core.rmem_max" = "268435456"
    "net.ipv4.conf.eth1.rp_filter" = "2"`, 1)
	cfg, diags := config.Parse(config.Source{Filename: "fasterdata.hcl", Bytes: []byte(text)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	d, err := Compile(cfg, "dtn-west")
	if err != nil {
		t.Fatal(err)
	}
	id := item.Item{Kind: item.KindSysctl, Key: item.RPFilterKey("eth1")}.ID()
	n := 0
	seen := map[string]int{}
	for _, it := range d.Items {
		seen[it.ID()]++
		if it.ID() == id {
			n++
		}
	}
	if n != 1 {
		t.Errorf("desired state of dtn-west holds %s %d times, want once", id, n)
	}
	// What the operator meets: a saved plan of a fresh node is refused.
	p := plan.Diff(d.Items, nil, nil)
	b, err := plan.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.Decode(b); err != nil {
		t.Errorf("saved plan of dtn-west: %v", err)
	}
	for k, c := range seen {
		if c > 1 && k != id {
			t.Errorf("desired state holds %s %d times", k, c)
		}
	}
}
