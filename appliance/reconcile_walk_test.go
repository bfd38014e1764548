package appliance

import (
	"context"
	"fmt"
	"github.com/sosappliance/sosappliance/host/item"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/tuning"
)

// walkStates are tuning states of one node. They overlap on purpose: the
// same key with different values, keys that come and go, a value equal to
// the host's original, IRQs both spread and restored.
var walkStates = [][]item.Item{
	{},
	{
		sysctlItem("net.core.rmem_max", "134217728"),
		sysctlItem("net.ipv4.tcp_rmem", "4096 87380 67108864"),
		{Kind: item.KindIRQ, Key: "eth1", Value: "0-1"},
	},
	{
		sysctlItem("net.core.rmem_max", "268435456"),
		sysctlItem("net.core.wmem_max", "268435456"),
		sysctlItem("net.ipv4.tcp_congestion_control", "bbr"),
		{Kind: item.KindIRQ, Key: "eth1", Value: "2"},
	},
	{
		sysctlItem("net.ipv4.tcp_rmem", "8192 65536 33554432"),
		sysctlItem("net.ipv4.tcp_congestion_control", "reno"),
		sysctlItem("net.ipv4.tcp_mtu_probing", "1"),
	},
	{
		sysctlItem("net.core.rmem_max", "212992"),
		sysctlItem("net.ipv4.conf.eth1.rp_filter", "2"),
		{Kind: item.KindIRQ, Key: "eth1", Value: "0-3"},
	},
}

// itemFiles are the files under the host tree one item governs.
func itemFiles(it item.Item) []string {
	switch it.Kind {
	case item.KindSysctl:
		return []string{filepath.Join("proc/sys", strings.ReplaceAll(it.Key, ".", "/"))}
	case item.KindIRQ:
		return []string{"proc/irq/40/smp_affinity_list", "proc/irq/41/smp_affinity_list", "proc/irq/42/smp_affinity_list", "proc/irq/43/smp_affinity_list"}
	}
	return nil
}

// checkConverged checks that every desired item holds its value, a second
// plan is empty, and every file no desired item governs is as it was before
// the appliance ever ran.
func checkConverged(t *testing.T, st *store.Store, exs map[string]tuning.Executor, root string, desired []item.Item, original map[string]string) {
	t.Helper()
	obs, err := observeItems(context.Background(), exs, desired)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]item.Observation{}
	for _, o := range obs {
		got[o.ID()] = o
	}
	for _, it := range desired {
		want, _ := item.Canonical(it)
		if o := got[it.ID()]; !o.Present || o.Value != want.Value {
			t.Errorf("%s = %q (present %v), want %q", it.ID(), o.Value, o.Present, want.Value)
		}
	}
	if p := mustPlan(t, st, exs, desired); !p.Empty() {
		t.Errorf("plan after converging is not empty:\n%s", p.Text())
	}
	governed := map[string]bool{}
	for _, it := range desired {
		for _, f := range itemFiles(it) {
			governed[f] = true
		}
	}
	snap := snapshot(t, root)
	for f, v := range original {
		if !governed[f] && snap[f] != v {
			t.Errorf("%s = %q, want its original %q", f, snap[f], v)
		}
	}
	for f := range snap {
		if _, known := original[f]; !known && !governed[f] {
			t.Errorf("stray file %s", f)
		}
	}
}

// TestRandomWalkBetweenTuningStatesConverges jumps between tuning states in
// random order, with drift injected by hand and the store reopened along the
// way; every state must converge, and a final rollback must give back the
// original host.
func TestRandomWalkBetweenTuningStatesConverges(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed^0x5305))
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	dbPath := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	original := snapshot(t, root)

	for step := range 30 {
		switch r.IntN(8) {
		case 0:
			// Drift: someone changes a file behind the appliance's back.
			drifts := []struct {
				item        item.Item
				file, value string
			}{
				{sysctlItem("net.core.rmem_max", ""), "proc/sys/net/core/rmem_max", "4096"},
				{sysctlItem("net.ipv4.tcp_congestion_control", ""), "proc/sys/net/ipv4/tcp_congestion_control", "reno"},
				{item.Item{Kind: item.KindIRQ, Key: "eth1"}, "proc/irq/41/smp_affinity_list", "3"},
			}
			d := drifts[r.IntN(len(drifts))]
			if err := os.WriteFile(filepath.Join(root, d.file), []byte(d.value+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			// On an item the appliance owns, drift is undone and the value
			// recorded before its first touch stands; on any other it is
			// the host's own value from now on.
			_, owned, err := st.Record(d.item.Kind, d.item.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !owned {
				original[d.file] = d.value
			}
			t.Logf("step %d: drift %s=%s (owned %v)", step, d.file, d.value, owned)
			continue
		case 1:
			st.Close()
			if st, err = store.Open(dbPath, store.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		i := r.IntN(len(walkStates))
		t.Logf("step %d: converge to state %d", step, i)
		if _, _, err := Converge(ctx, st, exs, walkStates[i], "node-a", fmt.Sprint(i)); err != nil {
			t.Fatalf("step %d state %d: %v", step, i, err)
		}
		checkConverged(t, st, exs, root, walkStates[i], original)
		if t.Failed() {
			t.Fatalf("step %d did not converge to state %d", step, i)
		}
	}

	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	checkConverged(t, st, exs, root, nil, original)
}
