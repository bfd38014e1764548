package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestStatusPublishing: two nodes publish, Statuses reads both; one
// changes its file (flagged "config differs"), one stops (its entry goes
// with its lease, so it is flagged missing); an entry that is not JSON or
// is oversized, written by anyone who can write to etcd, is shown as a
// problem and never trusted or read beyond its bound.
func TestStatusPublishing(t *testing.T) {
	etcd := testsupport.StartEtcd(t, 1)
	// The nodes' file hashes, read by their publishers' goroutines.
	var hashMu sync.Mutex
	hash := map[string]string{"ctl-a": "aaaa", "agent-x": "aaaa"}
	type pub struct {
		cli  *Client
		stop func()
	}
	pubs := map[string]pub{}
	for _, node := range []string{"ctl-a", "agent-x"} {
		cli, err := Open(testConfig(etcd, node), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		p := cli.Publisher(func() NodeStatus {
			hashMu.Lock()
			defer hashMu.Unlock()
			return NodeStatus{Roles: []string{"r"}, ConfigHash: hash[node], Serial: 3, LastApply: "ok", Health: "ok"}
		})
		p.every = 50 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.Run(ctx); close(done) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(func() { stop(); cli.Close() })
		pubs[node] = pub{cli, stop}
	}
	reader := pubs["ctl-a"].cli
	expected := []string{"agent-x", "ctl-a"}
	read := func() []Row {
		st, err := reader.Statuses(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return Report(st, expected, "aaaa")
	}
	testsupport.Eventually(t, 10*time.Second, "both nodes published", func() bool {
		rows := read()
		return len(rows) == 2 && Problems(rows) == 0 && rows[0].Serial == 3
	})

	hashMu.Lock()
	hash["agent-x"] = "bbbb"
	hashMu.Unlock()
	testsupport.Eventually(t, 10*time.Second, "the differing file flagged", func() bool {
		rows := read()
		return len(rows) == 2 && rows[0].Node == "agent-x" && strings.Join(rows[0].Problems, ";") == "config differs"
	})

	pubs["agent-x"].stop()
	testsupport.Eventually(t, 10*time.Second, "the stopped node flagged missing", func() bool {
		rows := read()
		return len(rows) == 2 && rows[0].Missing
	})

	// Hostile entries.
	ctx := context.Background()
	if _, err := reader.cli.Put(ctx, "/sos-test/status/garbage", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.cli.Put(ctx, "/sos-test/status/huge", strings.Repeat("x", 200<<10)); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.cli.Put(ctx, "/sos-test/status/liar", `{"node":"ctl-a","config_hash":"aaaa","health":"ok"}`); err != nil {
		t.Fatal(err)
	}
	rows := read()
	got := map[string]string{}
	for _, r := range rows {
		got[r.Node] = strings.Join(r.Problems, ";")
	}
	for node, want := range map[string]string{
		"garbage": "status entry does not decode",
		"huge":    "status entry of 204800 bytes, over 65536",
		"liar":    `entry under "liar" names node "ctl-a"`,
		"ctl-a":   "",
		"agent-x": "missing: publishes no status",
	} {
		if !strings.Contains(got[node], want) || (want == "" && got[node] != "") {
			t.Errorf("%s: problems %q, want %q", node, got[node], want)
		}
	}
	var b bytes.Buffer
	WriteTable(&b, rows, "aaaa", time.Now())
	t.Logf("\n%s", b.String())
	for _, want := range []string{"this file: sha256:aaaa", "agent-x  -", "not in this file"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
}
