package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	lab := upLab(ctx, t, labnet.Options{
		Config: "sos.hcl", Sosappliance: sos, Wanem: wanem, WAN: labnet.DefaultWAN, Controllers: 2,
	})
	files := newFileServer(t)
	serveFilesOn(t, lab, labnet.Server, netip.AddrPortFrom(labnet.ServerAddr, httpPort), files)

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
	d := startDownload(ctx, t, lab, labnet.Client, files, "-o", "-", fmt.Sprintf("http://%s:%d/big", labnet.ServerAddr, httpPort))
	if err := carried(ctx, lab, d.remote, httpPort); err != nil {
		t.Errorf("download not carried by the agents: %v", err)
	}
	if err := lab.KillNode(master); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testsupport.Eventually(t, time.Minute, "the other controller to become master", func() bool { return role(other) == "master" })
	takeover := time.Since(killed)
	if err := d.wait(); err != nil {
		t.Fatalf("curl: %v", err)
	}
	d.requireBig(t, files)
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
