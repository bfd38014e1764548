package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestNoLeaderReportAfterTheTermEnded: the term checked that its key
// leads, then reported "leader" without looking at the term again, so a
// term that holdLease ended between the two (the lease about to expire)
// was reported leader for a moment, and the controller would program
// the switches as master past the lease's horizon. Here the term is ended
// exactly there, through the hook, in the first term: no leader report
// may come of it, and the next term leads. Not parallel: the hook is the
// package's (a sequential test runs alone).
func TestNoLeaderReportAfterTheTermEnded(t *testing.T) {
	var terms atomic.Int32
	afterLeadCheck = func(cancel context.CancelFunc) {
		if terms.Add(1) == 1 {
			cancel()
		}
	}
	t.Cleanup(func() { afterLeadCheck = nil }) // after the node stops
	etcd := testsupport.StartEtcd(t, 1)
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/sos-flash/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	testsupport.Eventually(t, 20*time.Second, "a to lead in a later term", func() bool { return a.el.Role().Leader })
	if n := terms.Load(); n < 2 {
		t.Fatalf("a leads after %d lead check(s), want the second term's", n)
	}
	a.tl.mu.Lock()
	defer a.tl.mu.Unlock()
	var leads int
	for _, tr := range a.tl.trans {
		if tr.leader {
			leads++
		}
	}
	if leads != 1 {
		t.Errorf("a was reported leader %d times %+v: want once, in the second term (never in the first, ended before its report)", leads, a.tl.trans)
	}
}
