package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// compactEtcd writes n keys under prefix and compacts etcd to its
// current revision, as etcd's --auto-compaction does in a deployment
// that runs for a while (the status entries are rewritten all along).
func compactEtcd(t *testing.T, cli *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rev int64
	for i := range n {
		resp, err := cli.Put(ctx, fmt.Sprintf("%sfiller/%d", prefix, i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestWatchesEndAfterCompactionAndReconnect: a leads through
// a connection to etcd that is dropped once (the client reconnects at
// once; the lease never comes near expiry) after etcd compacted past
// a's key's revision, as any deployment with auto-compaction does. The
// own-key watch and the observer resume at the revision after a's key
// (they saw no event since), which is compacted: etcd cancels both, the
// channels close, and watchOwnKey and observe returned without ending
// the term or starting again. Then a's key is deleted (etcdctl del, the
// step-down the README offers): b takes the lead, and a, whose lease is
// renewed all along, must step down; it led on beside b. Now both watch
// again, from a read of the key. Without the compaction (subtest
// "reconnect only") the watches resume and see the delete. Found by
// review (helper-82).
func TestWatchesEndAfterCompactionAndReconnect(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	for _, compact := range []bool{false, true} {
		name := "reconnect only"
		if compact {
			name = "compacted then reconnect"
		}
		t.Run(name, func(t *testing.T) { compactThenReconnect(t, compact) })
	}
}

func compactThenReconnect(t *testing.T, compact bool) {
	etcd := testsupport.StartEtcd(t, 1)
	proxy := faultsStartProxy(t, etcd.Endpoints()[0][len("http://"):])
	cfg := Config{Endpoints: []string{proxy.endpoint()}, Prefix: "/sos-compact/", LeaseTTL: 3 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.el.Role().Leader })
	cfgB := cfg
	cfgB.Endpoints, cfgB.Node = etcd.Endpoints(), "ctl-b"
	b := faultsStart(t, cfgB)
	testsupport.Eventually(t, 10*time.Second, "b to follow a", func() bool { return b.el.Role().LeaderNode == "ctl-a" })
	time.Sleep(500 * time.Millisecond) // watchOwnKey polls every 100 ms before it watches
	if compact {
		compactEtcd(t, b.cli.cli, cfg.Prefix, 20)
	}
	proxy.reset()
	time.Sleep(2 * time.Second) // a's client reconnects; its lease is renewed
	if !a.el.Role().Leader {
		t.Fatalf("a lost the lead over one dropped connection: %+v", a.el.Role())
	}
	resp, err := b.cli.cli.Get(context.Background(), cfg.electionKey()+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("a's election key: %v", err)
	}
	if _, err := b.cli.cli.Delete(context.Background(), string(resp.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "b to lead", func() bool { return b.el.Role().Leader })
	both := !testsupport.Poll(4*cfg.LeaseTTL, func() bool { return !a.el.Role().Leader })
	if both {
		ra, rb := a.el.Role(), b.el.Role()
		t.Errorf("two masters %v after a's key was deleted: a leads with generation %d (lease still renewed), b with %d; a's watches on its key and on the election ended silently at the compaction",
			4*cfg.LeaseTTL, ra.Generation, rb.Generation)
	}
}

// TestWatchesEndAfterEtcdRestart: a one-member etcd is
// restarted (killed and started again on its data, as an upgrade or a
// crash does) while a leads, well within a's lease (TTL 6 s; etcd extends
// every lease when it becomes leader again). Then a's key is deleted: b
// leads, and a must step down. Subtest "restart": the watches resume
// across the restart; it passes (4 of 4 runs). Subtest "compacted then
// restart": etcd compacted past a's key's revision before the restart
// (auto-compaction in any deployment that runs for a while): the
// resumed watches are refused as compacted, their channels close, and a
// led on beside b. Found by review (helper-82).
func TestWatchesEndAfterEtcdRestart(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	for _, compact := range []bool{false, true} {
		name := "restart"
		if compact {
			name = "compacted then restart"
		}
		t.Run(name, func(t *testing.T) { restartFault(t, compact) })
	}
}

func restartFault(t *testing.T, compact bool) {
	etcd := testsupport.StartEtcd(t, 1)
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/sos-restart/", LeaseTTL: 6 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.el.Role().Leader })
	time.Sleep(500 * time.Millisecond)
	if compact {
		compactEtcd(t, a.cli.cli, cfg.Prefix, 20)
	}
	etcd.Kill()
	etcd.Restart()
	time.Sleep(2 * time.Second)
	if !a.el.Role().Leader {
		t.Fatalf("a lost the lead over a quick etcd restart (lease TTL %v): %+v", cfg.LeaseTTL, a.el.Role())
	}
	cfgB := cfg
	cfgB.Node = "ctl-b"
	b := faultsStart(t, cfgB)
	testsupport.Eventually(t, 10*time.Second, "b to follow a", func() bool { return b.el.Role().LeaderNode == "ctl-a" })
	resp, err := b.cli.cli.Get(context.Background(), cfg.electionKey()+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != "ctl-a" {
		t.Fatalf("a's election key: %v", err)
	}
	if _, err := b.cli.cli.Delete(context.Background(), string(resp.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "b to lead", func() bool { return b.el.Role().Leader })
	if !testsupport.Poll(2*cfg.LeaseTTL, func() bool { return !a.el.Role().Leader }) {
		ra, rb := a.el.Role(), b.el.Role()
		t.Errorf("two masters %v after a's key was deleted: a (generation %d) and b (generation %d); a's watches ended at the etcd restart",
			2*cfg.LeaseTTL, ra.Generation, rb.Generation)
	}
}
