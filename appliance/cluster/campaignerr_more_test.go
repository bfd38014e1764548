package cluster

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestCampaignErrorIsRetried: the campaign's first request (the
// Txn that puts this node's key) fails while etcd answers otherwise and
// the lease lives. Here etcd refuses it as too large (a node value over
// etcd's 1.5 MiB request limit) as a stand-in for any failure of that Txn
// (etcdserver: leader changed, request timed out under a slow fsync). The
// elector must say so (Role.Err, Connected false) and retry; it must not
// sit "connected, no error" and out of the election for as long as the
// lease lives.
// Found by review (helper-77): the term waited on its observer for as
// long as its lease lived.
func TestCampaignErrorIsRetried(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 1)
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/r77-cerr/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second,
		Node: "ctl-" + strings.Repeat("x", 1600<<10)}
	a := faultsStart(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && a.el.Role().Err == "" {
		time.Sleep(100 * time.Millisecond)
	}
	if r := a.el.Role(); r.Err == "" {
		t.Errorf("10 s after start with a campaign etcd refuses: role connected=%v leader=%v err=%q: the failure is neither said nor retried", r.Connected, r.Leader, r.Err)
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*Elector).term") {
				t.Logf("elector's term goroutine:\n%s", g)
			}
		}
	}
}
