package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// haConfig is controllerConfig with two controller blocks and a cluster
// block: ctl-a and ctl-b, each with its own listen port.
func haConfig(portA, portB, healthPort int, etcd []string) string {
	src := controllerConfig(portA, healthPort, 5201)
	return strings.Replace(src, `controller {
  node      = "ctl"`, fmt.Sprintf(`cluster {
  etcd      = ["%s"]
  lease_ttl = "2s"
}
controller {
  node      = "ctl-b"
  listen    = "127.0.0.1:%d"
  keepalive = "1s"
  health_interval = "300ms"
}
controller {
  node      = "ctl-a"`, strings.Join(etcd, `", "`), portB), 1)
}

// haNode is one controller daemon of the test.
type haNode struct {
	name, cfg, socket string
	args              []string
	daemon            *testsupport.Daemon
}

func (n *haNode) status() (*appliance.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return appliance.FetchStatus(ctx, n.socket)
}

func (n *haNode) role() string {
	st, err := n.status()
	if err != nil || st.Cluster == nil {
		return ""
	}
	return st.Cluster.Role
}

// TestTwoControllersOnEtcd runs two `sosappliance run` controllers of one
// Open vSwitch bridge, elected on a real etcd, the bridge connected to
// both through a recording proxy. One becomes master and converges the
// switch; kill -9 of it hands the switch to the other within the lease
// TTL, which sends zero flow mods and still fails open; `status --cluster`
// flags the dead node as missing and, once it runs again with an edited
// file, as running another config; etcd killed makes the master step down
// with the flows untouched, and it is master again when etcd returns. No
// flow mod ever reaches the switch from a controller it did not have as
// master.
func TestTwoControllersOnEtcd(t *testing.T) {
	t.Parallel() // its own daemons, files and namespaces; mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, append(ovstest.Binaries, "etcd", "etcdctl")...)
	inst := ovstest.Start(t)
	etcd := testsupport.StartEtcdInNetns(t, 1, inst.Namespace)
	var ports [2]int
	for i := range ports {
		p := inst.FreePort(t)
		ports[i] = p
	}
	health, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var agentUp atomic.Bool
	agentUp.Store(true)
	healthSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !agentUp.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	})}
	go healthSrv.Serve(health)
	t.Cleanup(func() { healthSrv.Close() })
	healthPort := health.Addr().(*net.TCPAddr).Port

	proxy := &ovstest.RecordingProxy{}
	dir := t.TempDir()
	src := haConfig(ports[0], ports[1], healthPort, etcd.Endpoints())
	nodes := map[string]*haNode{}
	var targets []string
	for i, name := range []string{"ctl-a", "ctl-b"} {
		n := &haNode{name: name, cfg: filepath.Join(dir, name+".hcl"), socket: filepath.Join(dir, name+".sock")}
		testsupport.RequireNoError(t, os.WriteFile(n.cfg, []byte(src), 0o644))
		n.args = []string{"run", "--metrics-listen", "", "-c", n.cfg, "--node", name,
			"--state", filepath.Join(dir, name+".db"), "--control-socket", n.socket}
		nodes[name] = n
		// The proxy takes the switch's connection and hands it on to
		// the daemon's port.
		targets = append(targets, proxy.Front(t, inst, name, fmt.Sprintf("127.0.0.1:%d", ports[i])))
	}
	start := func(n *haNode) {
		n.daemon = testsupport.StartDaemon(t, testsupport.CommandInNetns(t, inst.Namespace, mainChild, n.args...))
	}
	for _, n := range nodes {
		start(n)
	}
	br := inst.AddBridge(t, ovstest.UniqueName("sw"), 0x5a01, targets...)
	inst.AddBridge(t, ovstest.UniqueName("swb"), 0x5b01, targets...)
	t.Logf("ovs-vsctl set-controller %s %s", br.Name, strings.Join(targets, " "))

	var master, slave *haNode
	testsupport.Eventually(t, converges, "a master", func() bool {
		for _, n := range nodes {
			if n.role() == "master" {
				master = n
			}
		}
		return master != nil
	})
	for _, n := range nodes {
		if n != master {
			slave = n
		}
	}
	testsupport.Eventually(t, converges, "flows installed by the master", func() bool { return len(ownedFlows(t, br)) == 3 })
	testsupport.Eventually(t, converges, "the other controller slave", func() bool { return slave.role() == "slave" })
	cluster := func(n *haNode) (int, string) {
		cmd := testsupport.CommandInNetns(t, inst.Namespace, mainChild, "status", "--cluster", "-c", n.cfg)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String() + errOut.String()
	}
	var code int
	var out string
	if !testsupport.Poll(converges, func() bool {
		code, out = cluster(slave)
		// The agent nodes na and nb run no daemon here: missing.
		a, b := rowOf(out, "ctl-a"), rowOf(out, "ctl-b")
		return code == 2 && strings.HasSuffix(a, " -") && strings.HasSuffix(b, " -") &&
			strings.Contains(a+b, "master (gen") && strings.Contains(a+b, "slave (gen") && strings.Contains(rowOf(out, "na"), "missing")
	}) {
		t.Fatalf("status --cluster: exit %d\n%s", code, out)
	}
	t.Logf("status --cluster:\n%s", out)
	if fm := proxy.FlowMods(slave.name, 0); fm != 0 {
		t.Errorf("the slave sent %d flow mods", fm)
	}

	// kill -9 the master: the slave takes over within the lease TTL (2 s)
	// plus a little, sending nothing to flows that match.
	before := ownedFlows(t, br)
	mark := proxy.Mark()
	master.daemon.Cmd.Process.Signal(syscall.SIGKILL)
	<-master.daemon.Done()
	killed := time.Now()
	testsupport.Eventually(t, converges, "the slave to become master", func() bool { return slave.role() == "master" })
	testsupport.Eventually(t, converges, "the switch to confirm the new master", func() bool {
		st, err := slave.status()
		return err == nil && len(st.Switches) == 2 && st.Switches[0].Name == "sw" && st.Switches[0].Connected && st.Switches[0].Flows == 3
	})
	takeover := time.Since(killed)
	t.Logf("TAKEOVER: kill -9 of the master to the new master's convergence: %v (lease TTL 2s)", takeover.Round(time.Millisecond))
	if n := proxy.FlowMods(slave.name, mark); n != 0 {
		t.Errorf("the new master sent %d flow mods to a switch that matched", n)
	}
	requireFlowsKept(t, before, ownedFlows(t, br))

	// The killed node's status lives on its lease only.
	testsupport.Eventually(t, converges, "status --cluster to flag the killed node missing", func() bool {
		code, out = cluster(slave)
		return code == 2 && strings.Contains(rowOf(out, master.name), "missing: publishes no status")
	})
	t.Logf("status --cluster with a node down:\n%s", out)

	// Fail-open still works, from the new master.
	mark = proxy.Mark()
	agentUp.Store(false)
	testsupport.Eventually(t, converges, "steering withdrawn by the new master", func() bool { return len(ownedFlows(t, br)) == 2 })
	agentUp.Store(true)
	testsupport.Eventually(t, converges, "steering restored", func() bool { return len(ownedFlows(t, br)) == 3 })
	if n := proxy.FlowMods(slave.name, mark); n == 0 {
		t.Errorf("fail-open sent no flow mods")
	}

	// The killed node comes back with an edited file: a slave, sending
	// nothing, and flagged as running another config.
	edited := strings.Replace(src, "security {", "# edited on this node only\nsecurity {", 1)
	testsupport.RequireNoError(t, os.WriteFile(master.cfg, []byte(edited), 0o644))
	mark = proxy.Mark()
	start(master)
	testsupport.Eventually(t, converges, "the restarted node to be slave", func() bool { return master.role() == "slave" })
	testsupport.Eventually(t, converges, "status --cluster to flag the edited file", func() bool {
		code, out = cluster(slave)
		return code == 2 && strings.HasSuffix(rowOf(out, master.name), " config differs") && strings.HasSuffix(rowOf(out, slave.name), " -")
	})
	t.Logf("status --cluster with a differing file:\n%s", out)
	if n := proxy.FlowMods(master.name, mark); n != 0 {
		t.Errorf("the restarted slave sent %d flow mods", n)
	}

	// etcd killed: the master keeps its role for the lease TTL, then both
	// are slaves and the flows stay as they are; etcd back, a master
	// again, with nothing to send.
	before = ownedFlows(t, br)
	mark = proxy.Mark()
	etcd.Kill()
	testsupport.Eventually(t, converges, "the master to step down", func() bool {
		st, err := slave.status()
		return err == nil && st.Cluster != nil && st.Cluster.Role == "slave" && st.Cluster.StepDowns > 0
	})
	testsupport.Eventually(t, converges, "status to say etcd is unreachable", func() bool {
		st, err := slave.status()
		return err == nil && !st.Cluster.Publishing
	})
	st, _ := slave.status()
	t.Logf("with etcd down: role %s, publishing %v, last error %q", st.Cluster.Role, st.Cluster.Publishing, st.Cluster.LastError)
	var text bytes.Buffer
	st.WriteText(&text)
	if !strings.Contains(text.String(), "etcd unreachable") || !strings.Contains(text.String(), "openflow role:  slave") {
		t.Errorf("status text with etcd down:\n%s", text.String())
	}
	time.Sleep(time.Second)
	requireFlowsKept(t, before, ownedFlows(t, br))
	etcd.Restart()
	var again *haNode
	testsupport.Eventually(t, converges, "a master again after etcd returns", func() bool {
		for _, n := range nodes {
			if n.role() == "master" {
				again = n
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second)
	requireFlowsKept(t, before, ownedFlows(t, br))
	if n := proxy.FlowMods("ctl-a", mark) + proxy.FlowMods("ctl-b", mark); n != 0 {
		t.Errorf("%d flow mods across the etcd outage", n)
	}
	t.Logf("master after etcd returned: %s", again.name)
	proxy.CheckOnlyMaster(t)
}

// rowOf is the line of node in a status --cluster table.
func rowOf(out, node string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, node+" ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// requireFlowsKept fails unless every flow of before is still there, the
// same entry (its duration went on).
func requireFlowsKept(t *testing.T, before, after map[string]ovstest.DumpedFlow) {
	t.Helper()
	if len(after) != len(before) {
		t.Fatalf("flows changed: %v -> %v", before, after)
	}
	for key, f := range after {
		if b, ok := before[key]; !ok || b.Cookie != f.Cookie || f.Duration < b.Duration {
			t.Errorf("flow %s was replaced", key)
		}
	}
}

// TestApplyLeavesClusterSwitchesToTheMaster: a one-shot apply on a
// controller node of a cluster sends no flow mods; the elected master does.
func TestApplyLeavesClusterSwitchesToTheMaster(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI(t, "apply", "-auto-approve", "-c", "../../examples/cluster.hcl", "--node", "ctl-east",
		"--state", filepath.Join(dir, "state.db"), "--control-socket", filepath.Join(dir, "none.sock"), "--switch-wait", "10s")
	if code != 0 || !strings.Contains(out, "Switches not converged here: with a cluster block the elected master") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
}
