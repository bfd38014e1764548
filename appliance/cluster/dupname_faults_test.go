package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// runPublisher runs a publisher of cfg until the test ends (stop
// ends it sooner); get is its status, nil for a healthy constant one.
func runPublisher(t *testing.T, cfg Config, log *slog.Logger, every time.Duration, get func() NodeStatus) (p *Publisher, stop func()) {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli, err := Open(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if get == nil {
		get = func() NodeStatus {
			return NodeStatus{Roles: []string{"r"}, ConfigHash: "aaaa", LastApply: "ok", Health: "ok"}
		}
	}
	p = cli.Publisher(get)
	p.every = every
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
			cli.Close()
			<-done
		})
	}
	t.Cleanup(stop)
	return p, stop
}

func rawClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	raw, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return raw
}

func rawEntry(t *testing.T, raw *clientv3.Client, key string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := raw.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].Lease
}

// TestDuplicateWithLongerTTLStaysFlagged: two processes publish
// as ctl-a; the second one's file says lease_ttl 8s (a copied, edited
// file: the same name is exactly what was not edited). The first
// (lease_ttl 2s) finds its entry written over only once per 8 s rewrite
// of the other, but forgot the other after 3 × its own TTL = 6 s: its
// Duplicate() and its entry went back to "ok" for part of every cycle,
// and the error was logged again each cycle, while both still ran. Now
// the flag holds while the other's lease lives. Found by review
// (helper-79).
func TestDuplicateWithLongerTTLStaysFlagged(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	short := Config{Endpoints: etcd.Endpoints(), Prefix: "/sos-dup/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	long := short
	long.LeaseTTL = 8 * time.Second
	a, _ := runPublisher(t, short, nil, 50*time.Millisecond, nil)
	raw := rawClient(t, etcd.Endpoints())
	testsupport.Eventually(t, 10*time.Second, "the first process published", func() bool {
		v, _ := rawEntry(t, raw, "/sos-dup/status/ctl-a")
		return strings.Contains(v, a.instance)
	})
	b, _ := runPublisher(t, long, nil, 50*time.Millisecond, nil)
	testsupport.Eventually(t, 30*time.Second, "the first process names the second", func() bool {
		return a.Duplicate() == b.instance
	})
	// Both run throughout: two of the second's rewrites.
	deadline := time.Now().Add(17 * time.Second)
	for time.Now().Before(deadline) {
		if d := a.Duplicate(); d == "" {
			t.Fatalf("the duplicate (lease_ttl 8s) still publishes as ctl-a, yet the process with lease_ttl 2s no longer says so")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHostileInstanceIsNotRepeatedRaw: whoever can write the
// deployment's prefix in etcd writes this node's entry with an instance
// holding terminal escapes and a newline (under 200 bytes, so it is
// taken whole). The publisher's Duplicate (what `status` prints) and the
// Health it publishes in its own entry (what every node's `status
// --cluster` prints) carried them raw; now they hold printable ASCII
// only. Found by review (helper-79).
func TestHostileInstanceIsNotRepeatedRaw(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logBuf, mu: &logMu}, nil))
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/sos-dup/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a, _ := runPublisher(t, cfg, log, 50*time.Millisecond, nil)
	raw := rawClient(t, etcd.Endpoints())
	key := "/sos-dup/status/ctl-a"
	testsupport.Eventually(t, 10*time.Second, "the publisher wrote", func() bool {
		v, _ := rawEntry(t, raw, key)
		return strings.Contains(v, a.instance)
	})
	ctx := context.Background()
	lease, err := raw.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Revoke(context.Background(), lease.ID)
	evil := "x\x1b[2J\x1b[H\x1b]0;owned\x07\rcluster:\tall ok\nnode name:\tunique\x00"
	body := `{"node":"ctl-a","health":"ok","instance":"` + jsonEscaped(evil) + `"}`
	if _, err := raw.Put(ctx, key, body, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 15*time.Second, "the publisher flagged the entry written over and wrote its own again", func() bool {
		v, _ := rawEntry(t, raw, key)
		return a.Duplicate() != "" && strings.Contains(v, a.instance) && strings.Contains(v, "another process")
	})
	var problems []string
	if d := a.Duplicate(); hasControl(d) {
		problems = append(problems, "Duplicate() (printed by `status`) = "+quoted(d))
	}
	sts, err := (&Client{cli: raw, cfg: cfg, log: slog.New(slog.DiscardHandler)}).Statuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Node == "ctl-a" && hasControl(st.Health) {
			problems = append(problems, "published health (printed by `status --cluster`) = "+quoted(st.Health))
		}
	}
	logMu.Lock()
	logged := logBuf.String()
	logMu.Unlock()
	if strings.ContainsAny(logged, "\x1b\x00\r\x07") {
		problems = append(problems, "log carries raw control characters: "+quoted(logged))
	}
	if len(problems) > 0 {
		t.Fatalf("another writer's instance reaches the operator raw:\n%s", strings.Join(problems, "\n"))
	}
}

// TestNoDuplicateAcrossEtcdFaults: one process alone, a status
// that changes on every tick (a write each tick), through etcd faults
// that end its lease and its term, or make writes time out that apply
// later: a 1.5 s hold of every byte (requests time out, then arrive and
// apply), a 5 s hold (lease lost; what was held, the old lease's writes
// among them, arrives after the heal), killing and restarting etcd past
// the lease, and a compaction. It must never call itself a duplicate.
// Written by review (helper-79); it passed.
func TestNoDuplicateAcrossEtcdFaults(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	px := faultsStartProxy(t, strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	cfg := Config{Endpoints: []string{px.endpoint()}, Prefix: "/sos-dup/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	var n atomic.Uint64
	a, _ := runPublisher(t, cfg, nil, 200*time.Millisecond, func() NodeStatus {
		return NodeStatus{Roles: []string{"r"}, ConfigHash: "aaaa", LastApply: "ok", Health: "ok", Serial: n.Add(1)}
	})
	raw := rawClient(t, etcd.Endpoints())
	key := "/sos-dup/status/ctl-a"
	published := func(what string) {
		t.Helper()
		testsupport.Eventually(t, 30*time.Second, what, func() bool {
			v, _ := rawEntry(t, raw, key)
			ok, _ := a.Connected()
			return ok && strings.Contains(v, a.instance)
		})
	}
	watch := func(d time.Duration, what string) {
		t.Helper()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if dup := a.Duplicate(); dup != "" {
				t.Fatalf("%s: a lone process says another publishes as it: %q (itself: %q)", what, dup, a.instance)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	published("first publish")
	px.cut.Store(true)
	watch(1500*time.Millisecond, "short hold")
	px.cut.Store(false)
	watch(3*time.Second, "after a short hold")
	px.cut.Store(true)
	watch(5*time.Second, "long hold")
	px.cut.Store(false)
	published("publishing again after a long hold")
	watch(3*time.Second, "after a long hold")
	etcd.Kill()
	watch(4*time.Second, "etcd down")
	etcd.Restart()
	published("publishing again after etcd restarted")
	watch(3*time.Second, "after etcd restarted")
	resp, err := raw.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(context.Background(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	watch(3*time.Second, "after compaction")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func quoted(s string) string { return strconv.Quote(s) }

// TestSamePhaseDuplicatesStayFlagged: two processes publish as
// ctl-a with the same file (lease_ttl 2s, the default tick of 1 s),
// started together. Each rewrites its unchanged entry every 3 s; the
// flag must hold on both, without a gap, while both run. Written by
// review (helper-79); it passed.
func TestSamePhaseDuplicatesStayFlagged(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	etcd := testsupport.StartEtcd(t, 1)
	cfg := Config{Endpoints: etcd.Endpoints(), Prefix: "/sos-dup/", LeaseTTL: 2 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a, _ := runPublisher(t, cfg, nil, time.Second, nil)
	b, _ := runPublisher(t, cfg, nil, time.Second, nil)
	testsupport.Eventually(t, 30*time.Second, "each names the other", func() bool {
		return a.Duplicate() == b.instance && b.Duplicate() == a.instance
	})
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		if a.Duplicate() == "" || b.Duplicate() == "" {
			t.Fatalf("both still publish as ctl-a, yet one no longer says so: a %q, b %q", a.Duplicate(), b.Duplicate())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
