package cluster

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFrozenFollowerMemberCostsNoLead: three etcd members; a
// leads and b follows, both with every member as endpoint (as the
// README's example), lease TTL 5 s. One member that is not the raft
// leader freezes (SIGSTOP: a hung VM, a host stall, or a member whose
// packets are dropped): its TCP connections stay up and unanswered. The
// other two keep quorum and the raft leader: etcd answers throughout and
// would never let a's lease go. Yet holdLease sends one KeepAliveOnce at
// a time with the deadline "lives", and the client spreads requests over
// the members round robin: the first one that lands on the frozen
// member waits until lives and the term ends; or the session's own
// keepalive stream sits on the frozen member, its answers stop, and
// sess.Done() ended the term (both seen, in different runs). a must
// keep the lead for the 15 s the member is frozen, and the lead must not
// change hands. Now each keepalive attempt waits a sixth of the TTL at
// most, and the session's end does not end the term. (A killed member,
// whose connections reset, the client drops at once: that held.) Found
// by review (helper-82).
func TestFrozenFollowerMemberCostsNoLead(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	endpoints, ds := etcdOfThree(t)
	followerFault(t, endpoints, ds, 1, true)
}

func followerFault(t *testing.T, endpoints []string, ds []*testsupport.Daemon, round int, frozen bool) {
	cfg := Config{Endpoints: endpoints, Prefix: fmt.Sprintf("/sos-member-%d/", round), LeaseTTL: 5 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	lgA := &moreLog{}
	a := moreStart(t, cfg, lgA)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.Role().Leader })
	cfgB := cfg
	cfgB.Node = "ctl-b"
	b := moreStart(t, cfgB, &moreLog{})
	testsupport.Eventually(t, 10*time.Second, "b to follow a", func() bool { return b.Role().LeaderNode == "ctl-a" })
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	time.Sleep(time.Second)
	// A member that is not the raft leader.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := admin.Status(ctx, endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	victim := -1
	for i, ep := range endpoints {
		s, err := admin.Status(ctx, ep)
		if err == nil && s.Header.MemberId != st.Leader {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("no follower member found")
	}
	if frozen {
		ds[victim].Cmd.Process.Signal(syscall.SIGSTOP)
		defer ds[victim].Cmd.Process.Signal(syscall.SIGCONT)
	} else {
		ds[victim].Kill()
	}
	const hold = 15 * time.Second
	lost := testsupport.Poll(hold, func() bool { return !a.Role().Leader })
	ta, da := a.Counts()
	tb, db := b.Counts()
	t.Logf("member m%d (not the raft leader) %s for up to %v, lease TTL %v: a takeovers %d step-downs %d (%d by holdLease, %d lease lost); b takeovers %d step-downs %d",
		victim, map[bool]string{true: "frozen", false: "killed"}[frozen], hold, cfg.LeaseTTL, ta, da,
		lgA.count("may expire before etcd answers"), lgA.count("lease lost (etcd unreachable"), tb, db)
	if lost || da > 0 {
		t.Errorf("a stepped down (%d times; b took over %d times) while one etcd follower was %s and the other two held quorum and leader: a needless change of master",
			da, tb, map[bool]string{true: "frozen", false: "killed"}[frozen])
	}
}
