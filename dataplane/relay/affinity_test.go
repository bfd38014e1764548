package relay

import (
	"os"
	"slices"
	"strconv"
	"testing"
)

func TestPinProcessPinsEveryThread(t *testing.T) {
	orig, err := threadAffinity(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pinThreads(orig); err != nil {
			t.Errorf("restore affinity: %v", err)
		}
	})
	target := orig[len(orig)-1:]
	if err := pinThreads(target); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		got, err := threadAffinity(tid)
		if err != nil {
			continue // thread exited
		}
		if !slices.Equal(got, target) {
			t.Errorf("thread %d affinity %v, want %v", tid, got, target)
		}
	}
	if err := pinThreads(nil); err == nil {
		t.Error("pinThreads(nil) succeeded")
	}
}
