package tuning

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRelayKindIsObsolete: relay pinning travels in the relay spec; the
// relay executor owns nothing, so an old record of it is forgotten.
func TestRelayKindIsObsolete(t *testing.T) {
	ctx := context.Background()
	ex := NewRelay(t.TempDir())
	it := Item{Kind: KindRelay, Key: RelayKeyCPUs, Value: "3"}
	if o := observeOne(t, ex, it); o.Present {
		t.Fatalf("observed %+v", o)
	}
	if err := ex.Validate(ctx, []Item{it}); err == nil || !strings.Contains(err.Error(), "from its spec") {
		t.Fatalf("Validate = %v", err)
	}
	if err := ex.Apply(ctx, it); err == nil {
		t.Fatal("Apply succeeded")
	}
	if err := ex.Remove(ctx, it); err != nil {
		t.Fatalf("Remove: %v", err)
	}
}

func TestPinProcessPinsEveryThread(t *testing.T) {
	orig, err := ProcessAffinity(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := PinProcess(orig); err != nil {
			t.Errorf("restore affinity: %v", err)
		}
	})
	target := orig[len(orig)-1:]
	if err := PinProcess(target); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		got, err := ProcessAffinity(tid)
		if err != nil {
			continue // thread exited
		}
		if !slices.Equal(got, target) {
			t.Errorf("thread %d affinity %v, want %v", tid, got, target)
		}
	}
	if err := PinProcess(nil); err == nil {
		t.Error("PinProcess(nil) succeeded")
	}
}
