package cluster

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// electorGoroutines counts the goroutines running the elector's or
// the etcd election's code.
func electorGoroutines() int {
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "cluster.(*Elector)") || strings.Contains(g, "concurrency.") {
			n++
		}
	}
	return n
}

// TestManyTermsLeakNothing: two candidates; the leader's key
// is deleted 8 times in a row (each time the leader steps down through
// watchOwnKey or observe, and a new term starts for it), with etcd up
// all along. The elector's goroutines (term, holdLease, observers,
// campaign, session) must not pile up with the terms, and once both
// electors have stopped and their clients are closed goleak finds
// nothing left. Written by review (helper-82); it passed: it adds the
// key-deletion path, many terms, and goleak to the flapping tests.
func TestManyTermsLeakNothing(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 1)
	ignore := goleak.IgnoreCurrent()
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/sos-leak/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	cfgB := cfg
	cfgB.Node = "ctl-b"
	b := faultsStart(t, cfgB)
	oneLeads := func() bool { return a.el.Role().Leader != b.el.Role().Leader }
	testsupport.Eventually(t, 10*time.Second, "one to lead", oneLeads)
	admin, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var base int
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := admin.Get(ctx, cfg.electionKey()+"/", clientv3.WithFirstCreate()...)
		if err == nil && len(resp.Kvs) > 0 {
			_, err = admin.Delete(ctx, string(resp.Kvs[0].Key))
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		prev := string(resp.Kvs[0].Value)
		testsupport.Eventually(t, 10*time.Second, fmt.Sprintf("round %d: the lead to move from %s", i, prev), func() bool {
			ra, rb := a.el.Role(), b.el.Role()
			return ra.Leader != rb.Leader && ra.Generation == rb.Generation && ((ra.Leader && prev == "ctl-b") || (rb.Leader && prev == "ctl-a"))
		})
		time.Sleep(300 * time.Millisecond)
		if i == 1 {
			base = electorGoroutines()
		}
	}
	time.Sleep(time.Second)
	after := electorGoroutines()
	ta, da := a.el.Counts()
	tb, db := b.el.Counts()
	t.Logf("elector goroutines %d after 2 terms, %d after 8; a %d/%d b %d/%d takeovers/step-downs", base, after, ta, da, tb, db)
	if after > base+4 {
		t.Errorf("elector goroutines grew from %d to %d over 14 terms", base, after)
	}
	a.stop()
	b.stop()
	admin.Close()
	goleak.VerifyNone(t, ignore)
}
