package cluster

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// renewalGoroutines counts the goroutines of holdLease's renewal attempts.
func renewalGoroutines() int {
	buf := make([]byte, 8<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "(*Elector).holdLease.func") {
			n++
		}
	}
	return n
}

// TestCutRenewalsEndWithTerm: a leads through a proxy, lease TTL 6 s;
// the proxy is cut (every byte held both ways, as a partition holds
// TCP), so no renewal is answered. holdLease sends one every TTL/6 beside
// those still waiting: there must never be more than 6 at once, the term
// must end by the lease horizon with them still waiting, and once it has
// ended (the cut still on), none of the attempts may be left behind,
// blocked on holdLease's answers channel or on the held connection. After
// the cut heals a leads again. Not covered elsewhere: the leak tests end
// terms by deleting the key, with no renewal waiting. Written by review
// (helper-85); it passed.
func TestCutRenewalsEndWithTerm(t *testing.T) {
	// Not parallel: it counts the process's renewal goroutines.
	etcd := testsupport.StartEtcd(t, 1)
	proxy := faultsStartProxy(t, etcd.Endpoints()[0][len("http://"):])
	cfg := Config{Endpoints: []string{proxy.endpoint()}, Prefix: "/sos-cut/", LeaseTTL: 6 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.el.Role().Leader })
	time.Sleep(500 * time.Millisecond)
	proxy.cut.Store(true)
	defer proxy.cut.Store(false)
	most := 0
	stepped := testsupport.Poll(2*cfg.LeaseTTL, func() bool {
		most = max(most, renewalGoroutines())
		return !a.el.Role().Leader
	})
	t.Logf("at most %d renewals waiting at once during the cut", most)
	if !stepped {
		t.Fatalf("a still leads %v into a cut: %+v", 2*cfg.LeaseTTL, a.el.Role())
	}
	if most > 6 || most < 3 {
		t.Errorf("%d renewal attempts were waiting at once during the cut; holdLease keeps one beside another, at most 6", most)
	}
	if !testsupport.Poll(5*time.Second, func() bool { return renewalGoroutines() == 0 }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d renewal attempts outlived the term that sent them (the cut still on):\n%s", renewalGoroutines(), buf[:runtime.Stack(buf, true)])
	}
	proxy.cut.Store(false)
	testsupport.Eventually(t, 20*time.Second, "a to lead again after the cut healed", func() bool { return a.el.Role().Leader })
}
