package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestMinorityMemberDoesNotStallTakeover: three etcd members, one of them
// (m2) cut off from its peers by nftables but still answering clients (a
// partition between etcd members, not between the nodes and etcd). Each
// round: a leads, b waits, m2 is cut off, a resigns; b leads within a few
// seconds. Found by review: the election's watches (Campaign's, Observe)
// did not require a leader, so one that landed on m2 stopped delivering
// events while the lease, kept alive through a healthy member, held: no
// master for as long as the partition lasted (3 of 4 rounds).
func TestMinorityMemberDoesNotStallTakeover(t *testing.T) {
	t.Parallel() // its own etcd in its own namespace; mostly waiting (see the Makefile's -parallel)
	if !testsupport.InFreshNetns(t, "etcd", "nft", "ip") {
		return
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ports := testsupport.FreePorts(t, 6)
	dir, err := os.MkdirTemp("", "partition-etcd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	var cluster []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	var endpoints []string
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]), fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		endpoints = append(endpoints, client)
		cmd := exec.Command("etcd", "--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "partition", "--log-level", "error", "--logger", "zap")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if i == 2 {
			// m2 runs as nobody, so that its own outgoing peer
			// connections can be told apart.
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		}
		var errBuf testsupport.LockedBuffer
		cmd.Stderr = &errBuf
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s stderr: %s", name, errBuf.String())
			}
		})
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
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
	nft := func(script string) {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, out)
		}
	}
	partition := func() {
		nft(fmt.Sprintf(`table inet partition {
  chain out {
    type filter hook output priority 0; policy accept;
    tcp dport %d drop
    meta skuid 65534 tcp dport { %d, %d } drop
  }
}
`, ports[5], ports[1], ports[3]))
	}
	heal := func() { nft("delete table inet partition\n") }

	log := slog.New(slog.DiscardHandler)
	healthy, err := Open(Config{Endpoints: endpoints[:1], Prefix: "/x/", LeaseTTL: 10 * time.Second, DialTimeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	stuck := 0
	const rounds = 4
	for i := range rounds {
		cfg := Config{Endpoints: endpoints, Prefix: fmt.Sprintf("/partition-part-%d/", i), LeaseTTL: 10 * time.Second,
			DialTimeout: time.Second, Node: "ctl-a"}
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
		b := cliB.Elector(nil)
		ctxB, cancelB := context.WithCancel(context.Background())
		doneB := make(chan struct{})
		go func() { b.Run(ctxB); close(doneB) }()
		testsupport.Eventually(t, 10*time.Second, "b to follow", func() bool { return b.Role().LeaderNode == "ctl-a" })

		partition()
		time.Sleep(6 * time.Second) // m2 notices it lost its leader
		resigned := time.Now()
		cancelA()
		<-doneA
		cliA.Close()
		led := testsupport.Poll(20*time.Second, func() bool { return b.Role().Leader })
		r := b.Role()
		// Is the lead b's in etcd? Asked of a healthy member only.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, gerr := healthy.cli.Get(ctx, cfg.electionKey()+"/", clientWithFirstCreate()...)
		cancel()
		var first string
		if gerr == nil && len(resp.Kvs) > 0 {
			first = string(resp.Kvs[0].Value)
		}
		if !led && first == "ctl-b" && r.Connected && r.Err == "" {
			stuck++
			t.Errorf("round %d: %v after a resigned, b is not master (role %+v); etcd's first election key is now %q (err %v)",
				i, time.Since(resigned).Round(time.Millisecond), r, first, gerr)
		} else {
			t.Logf("round %d: b led=%v %v after a resigned; first key %q", i, led, time.Since(resigned).Round(time.Millisecond), first)
		}
		heal()
		cancelB()
		<-doneB
		cliB.Close()
		time.Sleep(2 * time.Second)
	}
	t.Logf("%d of %d rounds: no master while a healthy etcd majority held the lead free", stuck, rounds)
}

func clientWithFirstCreate() []clientv3.OpOption { return clientv3.WithFirstCreate() }
