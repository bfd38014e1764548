package cluster

import (
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestShortEtcdStallKeepsLeader: two candidates; etcd stalls
// (SIGSTOP/SIGCONT: a slow fsync, a GC or CPU stall of the etcd host) 8
// times for about a third of the lease TTL (700 ms of 2 s, 1 s of 3 s), at
// spacings that walk through the phase of the keepalive cycle. Such a
// stall never lets etcd expire the lease (it is renewed right after), so
// etcd never lets another node lead: the leader must not step down, and
// the lead must not pass back and forth. Found by review (helper-77) of
// 838beff, whose step-down 2/3 of a TTL after the last keepalive answer
// did, 4 times in 12 stalls at 2 s; holdLease now counts from when each
// answered keepalive was sent.
func TestShortEtcdStallKeepsLeader(t *testing.T) {
	for _, c := range []struct{ ttl, stall time.Duration }{{2 * time.Second, 700 * time.Millisecond}, {3 * time.Second, time.Second}} {
		t.Run(c.ttl.String(), func(t *testing.T) {
			t.Parallel() // each its own etcd
			moreStalls(t, c.ttl, c.stall)
		})
	}
}

func moreStalls(t *testing.T, ttl, stall time.Duration) {
	ep, d := faultsEtcd(t)
	cfg := Config{Endpoints: []string{ep}, Prefix: "/r77-stall/", LeaseTTL: ttl, DialTimeout: time.Second, Node: "ctl-a"}
	lg := &moreLog{}
	a := moreStart(t, cfg, lg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.Role().Leader })
	cfg.Node = "ctl-b"
	b := moreStart(t, cfg, lg)
	testsupport.Eventually(t, 10*time.Second, "b to follow a", func() bool { return b.Role().LeaderNode == "ctl-a" })
	defer d.Cmd.Process.Signal(syscall.SIGCONT)
	for i := range 8 {
		d.Cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(stall)
		d.Cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(ttl - stall + 500*time.Millisecond + time.Duration(i)*137*time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	ta, da := a.Counts()
	tb, db := b.Counts()
	t.Logf("8 stalls of %v, lease TTL %v: a takeovers %d step-downs %d; b takeovers %d step-downs %d", stall, ttl, ta, da, tb, db)
	if da+db > 0 {
		t.Errorf("a leader stepped down %d times with etcd stalled %v at a time (lease TTL %v), the lead changed hands %d times; %d logged 'may expire before etcd answers'",
			da+db, stall, ttl, ta+tb-1, lg.count("may expire before etcd answers"))
	}
}
