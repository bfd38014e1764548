package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestStopInFirstSecondLeavesNoKey: an elector stopped at points
// in its first second (granting, campaigning, just leading; what a
// reload that replaces the cluster part does) returns, ends as not
// leader, and leaves no election key behind to stand in another's way.
// It passed.
// Written by review (helper-77); it passed.
func TestStopInFirstSecondLeavesNoKey(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting for leases (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	for i := range 12 {
		cfg := Config{Endpoints: etcd.Endpoints(), Prefix: fmt.Sprintf("/r77-stop%d/", i), LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
		cli, err := Open(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		el := cli.Elector(nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { el.Run(ctx); close(done) }()
		time.Sleep(time.Duration(i) * 7 * time.Millisecond * time.Duration(i))
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("stop %d: Run did not return", i)
		}
		resp, err := cli.cli.Get(context.Background(), cfg.electionKey(), clientv3.WithPrefix())
		cli.Close()
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 || el.Role().Leader {
			t.Errorf("stop after %v: %d election keys left, leader %v", time.Duration(i)*7*time.Millisecond*time.Duration(i), len(resp.Kvs), el.Role().Leader)
		}
	}
}

// TestSoleLeaderKeyDeletedStillLeads: the sole candidate's key is
// deleted while it leads (etcdctl del --prefix of the deployment, a
// restore without the election keys). No other key comes, so observe
// never sees "a larger create revision": the node goes on saying it
// leads, with a generation whose key is gone, and no key in etcd says so.
// Found by review (helper-77) of 838beff: watchOwnKey now sees the delete.
func TestSoleLeaderKeyDeletedStillLeads(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting for leases (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/r77-del1/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.el.Role().Leader })
	gen := a.el.Role().Generation
	if _, err := a.cli.cli.Delete(context.Background(), cfg.electionKey()+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * cfg.LeaseTTL)
	resp, err := a.cli.cli.Get(context.Background(), cfg.electionKey()+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if r := a.el.Role(); r.Leader && r.Generation == gen {
		t.Errorf("%v after its key was deleted a still leads with generation %d; election keys in etcd: %d", 4*cfg.LeaseTTL, gen, len(resp.Kvs))
	}
}
