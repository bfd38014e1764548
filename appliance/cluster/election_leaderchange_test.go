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

// TestElectionSurvivesEtcdLeaderMoves: three etcd members; a leads,
// b follows; the etcd leader is moved between members many times (a normal
// leader change). With WithRequireLeader on the term's context, no role
// may change: a stays master with one takeover and no step-down, b never
// leads. b's term errors are logged (a follower re-campaigning is harmless).
func TestElectionSurvivesEtcdLeaderMoves(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 3)
	endpoints := etcd.Endpoints()
	log := slog.New(slog.DiscardHandler)
	cfg := Config{Endpoints: endpoints, Prefix: "/lc/", LeaseTTL: 10 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	var mu sync.Mutex
	var events []string
	rec := func(who string) func(Role) {
		return func(r Role) {
			mu.Lock()
			events = append(events, fmt.Sprintf("%s %s leader=%v conn=%v gen=%d err=%q", time.Now().Format("15:04:05.000"), who, r.Leader, r.Connected, r.Generation, r.Err))
			mu.Unlock()
		}
	}
	cliA, err := Open(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer cliA.Close()
	a := cliA.Elector(rec("a"))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { a.Run(ctx) })
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.Role().Leader })
	cfgB := cfg
	cfgB.Node = "ctl-b"
	cliB, err := Open(cfgB, log)
	if err != nil {
		t.Fatal(err)
	}
	defer cliB.Close()
	b := cliB.Elector(rec("b"))
	wg.Go(func() { b.Run(ctx) })
	testsupport.Eventually(t, 10*time.Second, "b to follow", func() bool { return b.Role().LeaderNode == "ctl-a" })

	// One client per member, to find and move the etcd leader.
	per := make([]*clientv3.Client, 3)
	for i, ep := range endpoints {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		per[i] = c
	}
	moves := 0
	for round := range 12 {
		var leaderIdx = -1
		var ids [3]uint64
		var lead uint64
		for i, c := range per {
			sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := c.Status(sctx, endpoints[i])
			scancel()
			if err != nil {
				continue
			}
			ids[i], lead = st.Header.MemberId, st.Leader
		}
		for i := range ids {
			if ids[i] == lead {
				leaderIdx = i
			}
		}
		if leaderIdx < 0 {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		to := (leaderIdx + 1 + round%2) % 3
		mctx, mcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := per[leaderIdx].MoveLeader(mctx, ids[to])
		mcancel()
		if err != nil {
			t.Logf("round %d: move-leader: %v", round, err)
		} else {
			moves++
		}
		time.Sleep(700 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	ta, sa := a.Counts()
	tb, _ := b.Counts()
	mu.Lock()
	for _, e := range events {
		t.Log(e)
	}
	mu.Unlock()
	t.Logf("%d leader moves; a takeovers %d step-downs %d; b takeovers %d", moves, ta, sa, tb)
	if !a.Role().Leader || ta != 1 || sa != 0 || tb != 0 {
		t.Errorf("normal etcd leader changes moved the OpenFlow master: a %+v (takeovers %d, step-downs %d), b %+v (takeovers %d)", a.Role(), ta, sa, b.Role(), tb)
	}
}
