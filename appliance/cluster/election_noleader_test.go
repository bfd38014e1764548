package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// etcdOfThree starts three etcd members whose processes the test holds
// (to stop and continue each on its own).
func etcdOfThree(t *testing.T) ([]string, []*testsupport.Daemon) {
	t.Helper()
	ports := testsupport.FreePorts(t, 6)
	dir := t.TempDir()
	var cluster, endpoints []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
	}
	var ds []*testsupport.Daemon
	for i := range 3 {
		name, peer := fmt.Sprintf("m%d", i), fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		cmd := exec.Command("etcd", "--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", endpoints[i], "--advertise-client-urls", endpoints[i],
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "sos-three", "--log-level", "error", "--logger", "zap")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		d := testsupport.StartDaemon(t, cmd)
		t.Cleanup(func() { d.Cmd.Process.Signal(syscall.SIGCONT) })
		ds = append(ds, d)
	}
	etcdHealthy(t, endpoints)
	return endpoints, ds
}

func etcdHealthy(t *testing.T, endpoints []string) {
	t.Helper()
	hc := http.Client{Timeout: time.Second}
	testsupport.Eventually(t, 30*time.Second, "etcd healthy", func() bool {
		for _, ep := range endpoints {
			resp, err := hc.Get(ep + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return false
			}
		}
		return true
	})
}

// TestWatchesEndWhenMemberLosesLeader: three etcd members; a
// leads through m0 alone (its only endpoint), b follows through m1 and
// m2, lease TTL 15 s. m1 and m2 stall (SIGSTOP) for 6.5 s, then
// continue: m0 has no raft leader for a few seconds, well inside the
// lease (etcd extends every lease when a new raft leader takes over),
// and a keeps the lead. But after three election timeouts without a
// leader m0 cancels every stream that requires one (the term's
// WithRequireLeader), and the client closes such watch channels
// (ErrNoLeader) rather than resuming them: watchOwnKey and observe
// ended, silently and for good. Then a's key is deleted: b leads, and a
// must step down; it led on. Subtest "short stall" (1.5 s, streams not
// cancelled) is the control. Found by review (helper-82).
func TestWatchesEndWhenMemberLosesLeader(t *testing.T) {
	t.Parallel() // its own etcd; mostly waiting (see the Makefile's -parallel)
	endpoints, ds := etcdOfThree(t)
	for i, c := range []struct {
		name  string
		stall time.Duration
	}{{"short stall", 1500 * time.Millisecond}, {"no leader for 6.5s", 6500 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) { noLeaderFault(t, endpoints, ds, i, c.stall) })
	}
}

func noLeaderFault(t *testing.T, endpoints []string, ds []*testsupport.Daemon, round int, stall time.Duration) {
	cfg := Config{Endpoints: endpoints[:1], Prefix: fmt.Sprintf("/sos-noleader-%d/", round), LeaseTTL: 15 * time.Second, DialTimeout: time.Second, Node: "ctl-a"}
	a := faultsStart(t, cfg)
	testsupport.Eventually(t, 10*time.Second, "a to lead", func() bool { return a.el.Role().Leader })
	cfgB := cfg
	cfgB.Endpoints, cfgB.Node = endpoints[1:], "ctl-b"
	b := faultsStart(t, cfgB)
	testsupport.Eventually(t, 10*time.Second, "b to follow a", func() bool { return b.el.Role().LeaderNode == "ctl-a" })
	time.Sleep(500 * time.Millisecond)

	for _, d := range ds[1:] {
		d.Cmd.Process.Signal(syscall.SIGSTOP)
	}
	time.Sleep(stall)
	for _, d := range ds[1:] {
		d.Cmd.Process.Signal(syscall.SIGCONT)
	}
	etcdHealthy(t, endpoints)
	time.Sleep(2 * time.Second) // keepalives answered again
	if !a.el.Role().Leader {
		t.Fatalf("a lost the lead over a %v stall of the other members (lease TTL %v): %+v", stall, cfg.LeaseTTL, a.el.Role())
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, cfg.electionKey()+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != "ctl-a" {
		t.Fatalf("a's election key: %v %v", err, resp)
	}
	if _, err := admin.Delete(ctx, string(resp.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 20*time.Second, "b to lead", func() bool { return b.el.Role().Leader })
	if !testsupport.Poll(10*time.Second, func() bool { return !a.el.Role().Leader }) {
		ra, rb := a.el.Role(), b.el.Role()
		t.Errorf("two masters 10s after a's key was deleted: a (generation %d, connected %v) and b (generation %d); a's etcd member was without a raft leader for part of a %v stall of the others, which ended a's watches for good",
			ra.Generation, ra.Connected, rb.Generation, stall)
	}
}
