package appliance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestForgedDuplicateCannotWriteStatusLines: anyone who can write
// the deployment's prefix in etcd writes this node's status entry with an
// "instance" of terminal escapes and a newline. The daemon's `status`
// text printed it raw: the operator's terminal was cleared and retitled,
// and lines the daemon never wrote ("cluster: ... all ok", "node name:
// unique") appeared in its status. Found by review (helper-79).
func TestForgedDuplicateCannotWriteStatusLines(t *testing.T) {
	t.Parallel() // its own etcd and daemon; mostly waiting for leases (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	d, err := NewDaemon(Options{ConfigPath: "unused.hcl", Node: "ctl-a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rc := swapInCluster(t, d, &desired.Cluster{
		Endpoints: etcd.Endpoints(), Prefix: "/sos-dupd/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second})
	t.Cleanup(rc.close)
	raw, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	key := "/sos-dupd/status/ctl-a"
	ctx := context.Background()
	testsupport.Eventually(t, 10*time.Second, "the daemon published", func() bool {
		resp, err := raw.Get(ctx, key)
		return err == nil && len(resp.Kvs) == 1
	})
	lease, err := raw.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Revoke(context.Background(), lease.ID)
	evil := "x\x1b[2J\x1b[H\x1b]0;owned\x07\r\ncluster:\tall ok\nnode name:\tunique"
	inst, _ := json.Marshal(evil)
	if _, err := raw.Put(ctx, key, `{"node":"ctl-a","health":"ok","instance":`+string(inst)+`}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 15*time.Second, "the daemon flags the entry written over", func() bool {
		c := d.Status().Cluster
		return c != nil && c.Duplicate != ""
	})
	var b bytes.Buffer
	st := d.Status()
	st.WriteText(&b)
	out := b.String()
	var bad []string
	if strings.ContainsAny(out, "\x1b\x07\r") {
		bad = append(bad, "terminal control characters")
	}
	// The daemon writes one line of each.
	lines := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		if k, _, ok := strings.Cut(l, ":"); ok && (k == "node name" || k == "cluster") {
			lines[k]++
		}
	}
	if lines["node name"] != 1 || lines["cluster"] != 1 {
		bad = append(bad, fmt.Sprintf("forged lines (%v)", lines))
	}
	if len(bad) > 0 {
		t.Fatalf("another writer's entry writes into `status`: %s\n%q", strings.Join(bad, "; "), out)
	}
}

// TestReloadIsNotADuplicate: a reload that changes the lease TTL
// starts the new cluster part (a new publisher, a new instance id, a new
// lease) before the old one is stopped; both publish as this node for a
// moment. The daemon must not call itself a duplicate of its own old
// publisher. Written by review (helper-79); it passed.
func TestReloadIsNotADuplicate(t *testing.T) {
	t.Parallel() // its own etcd and daemon; mostly waiting for leases (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	d, err := NewDaemon(Options{ConfigPath: "unused.hcl", Node: "ctl-a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var rcs []*runningCluster
	t.Cleanup(func() {
		for _, rc := range rcs {
			rc.close()
		}
	})
	for i := range 8 {
		rc := swapInCluster(t, d, &desired.Cluster{
			Endpoints: etcd.Endpoints(), Prefix: "/sos-dupd/", LeaseTTL: time.Duration(2+i%2) * time.Second, DialTimeout: time.Second})
		rcs = append(rcs, rc)
		end := time.Now().Add(time.Duration(500+700*(i%3)) * time.Millisecond)
		for time.Now().Before(end) {
			if c := d.Status().Cluster; c != nil && c.Duplicate != "" {
				t.Fatalf("reload %d: the daemon calls its own old publisher a duplicate: %q", i, c.Duplicate)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		if c := d.Status().Cluster; c != nil && c.Duplicate != "" {
			t.Fatalf("after the reloads the daemon calls its own old publisher a duplicate: %q", c.Duplicate)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
