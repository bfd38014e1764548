package tuning

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

func TestRelayStoresCPUList(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeTree(t, root, map[string]string{"sys/devices/system/cpu/online": "0-3\n"})
	ex := NewRelay(root)
	it := item.Item{Kind: item.KindRelay, Key: item.RelayKeyCPUs, Value: "3,2"}
	if o := observeOne(t, ex, it); o.Present {
		t.Fatalf("observed before apply: %+v", o)
	}
	if err := ex.Validate(ctx, []item.Item{it}); err != nil {
		t.Fatal(err)
	}
	if err := ex.Apply(ctx, it); err != nil {
		t.Fatal(err)
	}
	if o := observeOne(t, ex, it); !o.Present || o.Value != "2-3" {
		t.Fatalf("observed after apply: %+v", o)
	}
	cpus, ok, err := LoadRelayCPUs(root)
	if err != nil || !ok || !slices.Equal(cpus, []int{2, 3}) {
		t.Fatalf("LoadRelayCPUs = %v %v %v", cpus, ok, err)
	}
	if err := ex.Remove(ctx, it); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := LoadRelayCPUs(root); ok {
		t.Fatal("relay CPUs still stored after Remove")
	}
	if err := ex.Remove(ctx, it); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	err = ex.Validate(ctx, []item.Item{{Kind: item.KindRelay, Key: item.RelayKeyCPUs, Value: "4"}, {Kind: item.KindRelay, Key: "threads", Value: "1"}})
	if err == nil || !strings.Contains(err.Error(), "CPUs 4 are not online") || !strings.Contains(err.Error(), `relay key "threads"`) {
		t.Fatalf("Validate = %v", err)
	}
}
