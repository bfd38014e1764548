package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRoleCallbacksInOrder: roles reach onChange in order, so that the
// last one delivered is the elector's current role, even when the
// callback is slow (in the daemon it waits for the controller's mutex).
// Found by review: term and observe both delivered at a takeover, and
// observe's "slave, leader = me" could land after term's "leader".
func TestRoleCallbacksInOrder(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 1)
	log := slog.New(slog.DiscardHandler)
	for i := range 8 {
		cfg := testConfig(etcd, "ctl-a")
		cfg.Prefix = "/sos-order-order/"
		cliA, err := Open(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		a := cliA.Elector(nil)
		ctxA, cancelA := context.WithCancel(context.Background())
		doneA := make(chan struct{})
		go func() { a.Run(ctxA); close(doneA) }()
		testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.Role().Leader })

		cfgB := cfg
		cfgB.Node = "ctl-b"
		cliB, err := Open(cfgB, log)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var last Role
		delivered := 0
		b := cliB.Elector(func(r Role) {
			// A busy consumer: the observe goroutine's report of our own
			// key, as a non-leader, takes a little while to be applied.
			if !r.Leader && r.LeaderNode == "ctl-b" {
				time.Sleep(300 * time.Millisecond)
			}
			mu.Lock()
			last = r
			delivered++
			mu.Unlock()
		})
		ctxB, cancelB := context.WithCancel(context.Background())
		doneB := make(chan struct{})
		go func() { b.Run(ctxB); close(doneB) }()
		testsupport.Eventually(t, 10*time.Second, "b to follow a", func() bool { return b.Role().LeaderNode == "ctl-a" })

		cancelA() // a resigns: b takes over
		<-doneA
		cliA.Close()
		testsupport.Eventually(t, 10*time.Second, "b to lead", func() bool { return b.Role().Leader })
		time.Sleep(time.Second) // every callback of the takeover has returned
		mu.Lock()
		got, n := last, delivered
		mu.Unlock()
		held := b.Role()
		cancelB()
		<-doneB
		cliB.Close()
		if held.Leader && !got.Leader {
			t.Fatalf("round %d: the elector leads (generation %d) but the last role it delivered (of %d) is %+v: the controller is left SLAVE",
				i, held.Generation, n, got)
		}
		t.Logf("round %d: last delivered leader=%v (term won the race)", i, got.Leader)
	}
}

// TestStoppedCandidateLeavesNoKey: a controller that stops (daemon stop, or
// a reload that replaces its cluster part) while it is a waiting candidate
// takes its election key with it, so when the master then resigns (a
// rolling restart) the next candidate takes over at once. Found by review:
// the lease was revoked with the already-cancelled context, so the dead
// key "led" for a lease TTL.
func TestStoppedCandidateLeavesNoKey(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 1)
	log := slog.New(slog.DiscardHandler)
	cfg := testConfig(etcd, "ctl-a")
	cfg.Prefix = "/sos-order-linger/"
	cfg.LeaseTTL = 6 * time.Second
	type node struct {
		el     *Elector
		cli    *Client
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(name string) *node {
		c := cfg
		c.Node = name
		cli, err := Open(c, log)
		if err != nil {
			t.Fatal(err)
		}
		n := &node{el: cli.Elector(nil), cli: cli, done: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		go func() { n.el.Run(ctx); close(n.done) }()
		t.Cleanup(func() { cancel(); <-n.done; cli.Close() })
		return n
	}
	// stop is what runningCluster.close does: cancel, wait, close the client.
	stop := func(n *node) { n.cancel(); <-n.done; n.cli.Close() }

	a := start("ctl-a")
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.el.Role().Leader })
	b := start("ctl-b")
	testsupport.Eventually(t, 10*time.Second, "b to follow", func() bool { return b.el.Role().LeaderNode == "ctl-a" })
	c := start("ctl-c")
	testsupport.Eventually(t, 10*time.Second, "c to follow", func() bool { return c.el.Role().LeaderNode == "ctl-a" })

	stop(b) // b stops while waiting
	time.Sleep(200 * time.Millisecond)
	resp, err := c.cli.cli.Get(context.Background(), cfg.electionKey()+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		t.Logf("election key %s = %s", kv.Key, kv.Value)
	}
	resigned := time.Now()
	stop(a) // the master resigns
	testsupport.Eventually(t, 20*time.Second, "c to lead", func() bool { return c.el.Role().Leader })
	if took := time.Since(resigned); took > 2*time.Second {
		t.Errorf("c led %v after the master resigned (lease TTL %v): the stopped candidate's key led meanwhile (c saw leader %q)",
			took.Round(time.Millisecond), cfg.LeaseTTL, "ctl-b")
	}
}

// TestGenerationBaseAfterEtcdRebuilt: an etcd rebuilt (data lost, a new
// cluster, or a restore from an older snapshot) starts its revisions
// again, so the next leader's generation_id is smaller than the one the
// switches last saw, and they refuse every master request as stale. Found
// by review (the README promised a larger generation). With
// generation_base set above the old generation, as the README now says to
// do after a rebuild, the next leader's and its followers' generations are
// larger again.
func TestGenerationBaseAfterEtcdRebuilt(t *testing.T) {
	old := testsupport.StartEtcd(t, 1)
	cfg := testConfig(old, "ctl-a")
	cli, err := Open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 { // a deployment that has run a while
		if _, err := cli.cli.Put(context.Background(), cfg.Prefix+"filler", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	a, _ := startElector(t, cfg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.Role().Leader })
	before := a.Role().Generation
	old.Kill()

	rebuilt := testsupport.StartEtcd(t, 1) // the same deployment, etcd rebuilt
	plain, _ := startElector(t, testConfig(rebuilt, "ctl-b"))
	testsupport.Eventually(t, 10*time.Second, "b to lead", func() bool { return plain.Role().Leader })
	if after := plain.Role().Generation; after >= before {
		t.Fatalf("a rebuilt etcd gave generation %d, not below the %d of before: the test shows nothing", after, before)
	}
	for _, node := range []string{"ctl-c", "ctl-d"} {
		cfg := testConfig(rebuilt, node)
		cfg.Prefix = "/based/"
		cfg.GenerationBase = before
		el, _ := startElector(t, cfg)
		testsupport.Eventually(t, 10*time.Second, node+" to know a leader", func() bool { return el.Role().Generation != 0 })
		if got := el.Role().Generation; got <= before {
			t.Errorf("%s with generation_base %d: generation %d, not above the %d the switches last saw", node, before, got, before)
		}
	}
}
