package appliance

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestClusterSwapLeavesNoGoroutine: replacing the cluster part again and
// again (a reload that changes the cluster block), with etcd up and then
// with etcd down, leaves no goroutines behind.
func TestClusterSwapLeavesNoGoroutine(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 1)
	d, err := NewDaemon(Options{ConfigPath: "unused.hcl", Node: "ctl-a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	swap := func(i int) {
		spec := &desired.Cluster{Endpoints: etcd.Endpoints(), Prefix: "/sos-swap-leak/", LeaseTTL: 2 * time.Second,
			DialTimeout: time.Duration(1+i%2) * time.Second}
		swapInCluster(t, d, spec)
		time.Sleep(300 * time.Millisecond)
	}
	stopAll := func() {
		d.mu.Lock()
		rc := d.cl
		d.cl = nil
		d.clNow.Store(nil)
		d.mu.Unlock()
		if rc != nil {
			rc.close()
		}
	}
	swap(0)
	stopAll()
	time.Sleep(3 * time.Second)
	base := runtime.NumGoroutine()
	for i := range 10 {
		swap(i)
	}
	stopAll()
	etcd.Kill()
	for i := range 10 {
		swap(i)
	}
	stopAll()
	// The closed cluster parts' goroutines wind down in their own time
	// (a dial to the killed etcd ends at its DialTimeout): wait for them
	// as long as a loaded machine may take. A leak keeps them for good,
	// and fails here however long the wait.
	n := 0
	if !testsupport.Poll(30*time.Second, func() bool { n = runtime.NumGoroutine(); return n <= base+5 }) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines 30 s after 20 swaps, %d before\n%s", n, base, buf)
	}
}
