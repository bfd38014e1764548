package lab_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestLabControllerFailover runs the lab with two controllers and a
// three-member etcd (`lab up --controllers 2`), downloads 1 GiB through
// the agents, and kills the master controller with SIGKILL while the
// transfer runs: the download completes byte-identical, the other
// controller becomes master (the takeover time is logged, not asserted),
// new connections are still steered; then with every etcd member killed the
// new master steps down to slave, the flows stay and the agents keep
// carrying new connections.
func TestLabControllerFailover(t *testing.T) {
	requireE2E(t)
	testsupport.RequireBinaries(t, "etcd", "etcdctl")
	sos, wanem := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	lab, err := labnet.Up(ctx, labnet.Options{
		Config: "sos.hcl", Sosappliance: sos, Wanem: wanem, WAN: labnet.DefaultWAN,
		Progress: logWriter{t}, Controllers: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range lab.Nodes() {
				t.Logf("--- %s log (tail) ---\n%s", n.Name, lab.LogTail(n.Name, 25))
			}
		}
		if err := lab.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	files := newFileServer(t)
	ln, err := lab.Listen(labnet.Server, "tcp", netip.AddrPortFrom(labnet.ServerAddr, httpPort).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: files, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	controllers := []string{lab.Config().Controllers[0].Node, lab.Config().Controllers[1].Node}
	role := func(node string) string {
		out, err := lab.Status(ctx, node)
		if err != nil {
			return ""
		}
		var st struct {
			Cluster *struct {
				Role string `json:"role"`
			} `json:"cluster"`
		}
		if json.Unmarshal(out, &st) != nil || st.Cluster == nil {
			return ""
		}
		return st.Cluster.Role
	}
	var master, other string
	testsupport.Eventually(t, time.Minute, "a master controller", func() bool {
		for i, n := range controllers {
			if role(n) == "master" {
				master, other = n, controllers[1-i]
				return role(other) == "slave"
			}
		}
		return false
	})
	t.Logf("master %s, slave %s", master, other)

	// The download starts, is carried by the agents, then the master dies.
	seen := files.watch("/big")
	cmd := lab.Command(ctx, labnet.Client, "curl", "-sS", "--fail", "-o", "-",
		fmt.Sprintf("http://%s:%d/big", labnet.ServerAddr, httpPort))
	sum := sha256.New()
	var n countWriter
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(sum, &n), &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var remote netip.AddrPort
	select {
	case remote = <-seen:
	case err := <-done:
		t.Fatalf("curl ended before the server saw the request: %v: %s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the server saw no request within 30 s")
	}
	if err := carried(ctx, lab, remote, httpPort); err != nil {
		t.Errorf("download not carried by the agents: %v", err)
	}
	if err := lab.KillNode(master); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testsupport.Eventually(t, time.Minute, "the other controller to become master", func() bool { return role(other) == "master" })
	takeover := time.Since(killed)
	if err := <-done; err != nil {
		t.Fatalf("curl: %v: %s", err, stderr.String())
	}
	if int64(n) != bigSize {
		t.Fatalf("downloaded %d bytes, want %d", n, bigSize)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != files.bigSum {
		t.Fatalf("sha256 %s, want %s", got, files.bigSum)
	}
	t.Logf("TAKEOVER in the lab: kill -9 of %s to %s master: %v (lease TTL 3s); the 1 GiB download running meanwhile finished byte-identical",
		master, other, takeover.Round(time.Millisecond))

	// New connections are still steered by the flows the new master keeps.
	mustProbe(ctx, t, lab, files, true)

	// etcd gone: the master steps down when its lease expires, and the
	// agents keep relaying over the flows that stay.
	steeredBefore, err := lab.Steered(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.KillEtcd(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, time.Minute, "the master to step down without etcd", func() bool { return role(other) == "slave" })
	mustProbe(ctx, t, lab, files, true)
	steeredAfter, err := lab.Steered(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for w, ok := range steeredBefore {
		if ok && !steeredAfter[w] {
			t.Errorf("whitelist %s lost its steering with etcd down", w)
		}
	}
	t.Logf("etcd down: %s stepped down to slave, steering kept, a new connection carried by the agents", other)

	var out bytes.Buffer
	st := lab.Command(ctx, labnet.SwitchHost, sos, "status", "--cluster", "-c", lab.ConfigPath())
	st.Stdout, st.Stderr = &out, &out
	_ = st.Run() // etcd is down: it says so
	t.Logf("status --cluster with etcd down:\n%s", out.String())
}
