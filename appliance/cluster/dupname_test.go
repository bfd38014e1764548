package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// startPublisher runs a publisher of a healthy status for node, writing
// every 50 ms, until the test ends; stop ends it sooner.
func startPublisher(t *testing.T, etcd *testsupport.Etcd, node string) (p *Publisher, cli *Client, stop func()) {
	t.Helper()
	p, stop = runPublisher(t, testConfig(etcd, node), nil, 50*time.Millisecond, nil)
	return p, p.c, stop
}

func entryOf(t *testing.T, cli *Client, node string) (NodeStatus, bool) {
	t.Helper()
	sts, err := cli.Statuses(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Node == node {
			return st, true
		}
	}
	return NodeStatus{}, false
}

// TestSameNodeNameTwiceFlagged: two processes publishing under one node
// name (a copied file with --node left alone, a second host given the
// same name) overwrote each other's entry, and the table showed one
// healthy node. Each now finds its entry written over under another
// lease, says so in its entry (a problem in `status --cluster`) and in
// its local status, naming the other; once the other stops, the flag
// clears.
func TestSameNodeNameTwiceFlagged(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	a, cli, _ := startPublisher(t, etcd, "ctl-a")
	testsupport.Eventually(t, 10*time.Second, "the first process published", func() bool {
		st, ok := entryOf(t, cli, "ctl-a")
		return ok && st.Instance == a.instance
	})
	b, _, stopB := startPublisher(t, etcd, "ctl-a")
	testsupport.Eventually(t, 20*time.Second, "each process names the other", func() bool {
		return a.Duplicate() == b.instance && b.Duplicate() == a.instance
	})
	testsupport.Eventually(t, 10*time.Second, "the table flags the node", func() bool {
		st, ok := entryOf(t, cli, "ctl-a")
		rows := Report([]NodeStatus{st}, []string{"ctl-a"}, "aaaa")
		return ok && Problems(rows) == 1 && strings.Contains(strings.Join(rows[0].Problems, ";"), "another process publishes as node ctl-a")
	})

	stopB()
	testsupport.Eventually(t, 30*time.Second, "the flag clears once the other stopped", func() bool {
		st, ok := entryOf(t, cli, "ctl-a")
		return a.Duplicate() == "" && ok && st.Instance == a.instance && st.Health == "ok"
	})
}

// TestRestartedNodeNotFlagged: a node's process that died without
// revoking its lease leaves an entry that lives for a lease TTL; the
// restarted process takes it over without calling it a duplicate, and an
// entry deleted by hand is written again without one either.
func TestRestartedNodeNotFlagged(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	raw, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	lease, err := raw.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "/sos-test/status/ctl-a", `{"node":"ctl-a","health":"ok","instance":"host gone pid 1 id dead"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	p, cli, _ := startPublisher(t, etcd, "ctl-a")
	testsupport.Eventually(t, 10*time.Second, "the restarted process took the entry over", func() bool {
		st, ok := entryOf(t, cli, "ctl-a")
		return ok && st.Instance == p.instance
	})
	if _, err := raw.Delete(ctx, "/sos-test/status/ctl-a"); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the deleted entry written again", func() bool {
		st, ok := entryOf(t, cli, "ctl-a")
		return ok && st.Instance == p.instance
	})
	// Past the stale lease's end and two rewrites of an unchanged entry.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if d := p.Duplicate(); d != "" {
			t.Fatalf("flagged as a duplicate of %q", d)
		}
		if st, ok := entryOf(t, cli, "ctl-a"); ok && st.Health != "ok" {
			t.Fatalf("entry's health %q", st.Health)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterTableShowsNoControlCharacters: what nodes publish is
// anyone's who can write etcd; `status --cluster` printed it raw, so an
// entry whose health held escapes and a newline cleared the operator's
// terminal and added rows of its own. Every field from etcd now shows
// a rune that is not printable as '?'.
func TestClusterTableShowsNoControlCharacters(t *testing.T) {
	evil := "ok\x1b[2J\x1b]0;owned\x07\r\nctl-b  r  -  sha256:aaaa  -  1  ok  ok\t"
	rows := Report([]NodeStatus{{Node: "ctl-a\x1b[1m", Roles: []string{"r\n"}, ConfigHash: "aaaa", LastApply: evil, Health: evil, PSKIDs: []string{"\x07"}}}, []string{"ctl-a\x1b[1m"}, "aaaa")
	var b strings.Builder
	WriteTable(&b, rows, "aaaa", time.Now())
	if strings.ContainsAny(b.String(), "\x1b\x07\r\t") || strings.Count(b.String(), "\n") != 3 {
		t.Errorf("table:\n%q", b.String())
	}
}
