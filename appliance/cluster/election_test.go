package cluster

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func testConfig(e *testsupport.Etcd, node string) Config {
	return Config{Endpoints: e.Endpoints(), Prefix: "/sos-test/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: node}
}

func startElector(t *testing.T, cfg Config) (*Elector, context.CancelFunc) {
	t.Helper()
	cli, err := Open(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	el := cli.Elector(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { el.Run(ctx); close(done) }()
	stop := func() { cancel(); cli.Close(); <-done }
	t.Cleanup(stop)
	return el, func() { cancel(); <-done }
}

// TestElectionHandsOver: one of two candidates leads; when it resigns the
// other leads with a larger generation, and the first follows it.
func TestElectionHandsOver(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting for leases (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	a, stopA := startElector(t, testConfig(etcd, "ctl-a"))
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.Role().Leader })
	b, _ := startElector(t, testConfig(etcd, "ctl-b"))
	testsupport.Eventually(t, 10*time.Second, "b to see a lead", func() bool {
		r := b.Role()
		return !r.Leader && r.LeaderNode == "ctl-a" && r.Generation == a.Role().Generation
	})
	genA := a.Role().Generation
	stopA()
	testsupport.Eventually(t, 10*time.Second, "b to lead", func() bool { return b.Role().Leader })
	if r := b.Role(); r.Generation <= genA {
		t.Errorf("b leads with generation %d, a led with %d", r.Generation, genA)
	}
	if a.Role().Leader {
		t.Errorf("a still leads after it stopped")
	}
}

// TestElectionEtcdLost: with etcd killed the leader keeps the lead until
// its lease runs out, then steps down; when etcd returns one leads again
// with a larger generation.
func TestElectionEtcdLost(t *testing.T) {
	// Not parallel: 2 s leases and an exact step-down count.
	etcd := testsupport.StartEtcd(t, 1)
	a, _ := startElector(t, testConfig(etcd, "ctl-a"))
	b, _ := startElector(t, testConfig(etcd, "ctl-b"))
	testsupport.Eventually(t, 10*time.Second, "a leader", func() bool { return a.Role().Leader || b.Role().Leader })
	leader := a
	if b.Role().Leader {
		leader = b
	}
	gen := leader.Role().Generation
	etcd.Kill()
	killed := time.Now()
	testsupport.Eventually(t, 20*time.Second, "the leader to step down", func() bool { return !leader.Role().Leader })
	t.Logf("stepped down %v after etcd was killed (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))
	if a.Role().Leader || b.Role().Leader {
		t.Fatalf("a leader while etcd is down")
	}
	if _, down := leader.Counts(); down != 1 {
		t.Errorf("step downs %d", down)
	}
	etcd.Restart()
	testsupport.Eventually(t, 30*time.Second, "a leader again", func() bool { return a.Role().Leader || b.Role().Leader })
	for _, e := range []*Elector{a, b} {
		if r := e.Role(); r.Leader && r.Generation <= gen {
			t.Errorf("new generation %d after %d", r.Generation, gen)
		}
	}
}
