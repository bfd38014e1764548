package appliance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// reloadNode is one node that runs the controller and agent a1 over eth1
// (10.1.0.2) in a fresh network namespace. Its sysctls are a temp tree;
// its steering is the real nftables and policy routing of the namespace.
type reloadNode struct {
	t       *testing.T
	root    string
	dir     string
	cfgPath string
	psk     string
	logs    *testsupport.LockedBuffer
}

func newReloadNode(t *testing.T) *reloadNode {
	t.Helper()
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "eth1", "type", "veth", "peer", "name", "eth1p"},
		{"addr", "add", "10.1.0.2/24", "dev", "eth1"},
		{"link", "set", "eth1", "up"},
		{"link", "set", "eth1p", "up"},
	} {
		cmdOut(t, "ip", args...)
	}
	n := &reloadNode{t: t, root: tempHost(t), dir: t.TempDir(), logs: &testsupport.LockedBuffer{}}
	n.cfgPath = filepath.Join(n.dir, "sos.hcl")
	n.psk = filepath.Join(n.dir, "psk")
	writeFile(t, n.psk, strings.Repeat("5a", 32)+"\n")
	testsupport.RequireNoError(t, os.Chmod(n.psk, 0o600))
	return n
}

// reloadEdit is what one config of the node changes.
type reloadEdit struct {
	rmemMax        string
	controllerPort int
	dataPort       int
	tuningExtra    string
	agentExtra     string // more arguments of agent a1
}

func (n *reloadNode) config(e reloadEdit) string {
	return fmt.Sprintf(`
controller {
  node   = "host1"
  listen = "127.0.0.1:%d"
}
security { psk_file = %q }
daemon { shutdown_timeout = "2s" }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sa" { datapath_id = "00:00:00:00:00:00:0a:01" }
  agent "a1" {
    node        = "host1"
    switch      = "sa"
    switch_port = 2
    mac         = "02:00:00:00:0a:02"
    address     = "10.1.0.2"
    interface   = "eth1"
    data_port   = %d
    tuning      = ["t"]
    %s
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sb" { datapath_id = "00:00:00:00:00:00:0b:01" }
  agent "b1" {
    node        = "other"
    switch      = "sb"
    switch_port = 2
    mac         = "02:00:00:00:0b:02"
    address     = "10.2.0.2"
    interface   = "eth1"
  }
}
whitelist "w" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.10"
  server_port = 5201
}
tuning "t" {
  sysctl = { "net.core.rmem_max" = %q }
  %s
}
`, e.controllerPort, n.psk, e.dataPort, e.agentExtra, e.rmemMax, e.tuningExtra)
}

func (n *reloadNode) daemon() *Daemon {
	n.t.Helper()
	return n.daemonWith("")
}

// daemonWith is daemon with metrics served on metrics ("" for none).
func (n *reloadNode) daemonWith(metrics string) *Daemon {
	n.t.Helper()
	off := metrics
	execs := n.daemonExecutors()
	d, err := NewDaemon(Options{
		ConfigPath: n.cfgPath, Node: "host1", StatePath: filepath.Join(n.dir, "state.db"),
		ControlSocket: filepath.Join(n.dir, "control.sock"), MetricsListen: &off, Root: n.root,
		Executors: execs, Settle: 50 * time.Millisecond, DriftInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(n.logs, nil)),
	})
	testsupport.RequireNoError(n.t, err)
	return d
}

// daemonExecutors are the node's executors: sysctls in its temp tree,
// steering in the namespace.
func (n *reloadNode) daemonExecutors() map[string]tuning.Executor {
	execs := tempHostExecutors(n.root)
	execs[item.KindSteering] = tuning.NewSteering()
	return execs
}

// runDaemon runs d until the test ends, then stops it and, when the test
// failed, logs what it logged.
func runDaemon(t *testing.T, d *Daemon, logs *testsupport.LockedBuffer) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	return ctx
}

// runDaemonUntil runs d like runDaemon; the stop it returns ends it
// sooner (once). When the test failed, what more says is logged before
// the daemon's log.
func runDaemonUntil(t *testing.T, d *Daemon, logs *testsupport.LockedBuffer, more func() string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			if more != nil {
				t.Log(more())
			}
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	return stop
}

// steeringRules and steeringRoutes are the namespace's policy rules and
// the routes steering made (proto 83).
func steeringRules(t *testing.T) string { return cmdOut(t, "ip", "rule", "show") }
func steeringRoutes(t *testing.T) string {
	return cmdOut(t, "ip", "route", "show", "table", "all", "proto", "83")
}

// hostItems is everything the node's host items govern: the sysctl tree,
// the steering table and the policy rules.
func (n *reloadNode) hostItems() string {
	n.t.Helper()
	nft, _ := exec.Command("nft", "list", "table", "ip", tuning.SteeringTable).CombinedOutput()
	return fmt.Sprint(snapshot(n.t, n.root)) + "\n" + string(nft) + "\n" + cmdOut(n.t, "ip", "rule", "show")
}

// healthServes says whether the relay's health endpoint answers.
func healthServes() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://10.1.0.2:9878/healthz")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// openflowServes says whether an OpenFlow controller on addr answers a
// switch's hello with its own.
func openflowServes(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte{4, 0, 0, 8, 0, 0, 0, 1}); err != nil {
		return false
	}
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(bufio.NewReader(conn), hdr); err != nil {
		return false
	}
	return hdr[0] == 4 && hdr[1] == 0 // OpenFlow 1.3 OFPT_HELLO
}

func listens(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// TestReloadFailureKeepsTheOldConfigRunning: a reload that cannot start
// (a relay listener or the controller on a taken port, a relay that
// refuses its config) changes nothing: the old relay and controller keep
// serving on their listeners and the host items stay as they were. A
// good reload after them swaps listeners and stops the old ones.
func TestReloadFailureKeepsTheOldConfigRunning(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	good := reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}
	writeFile(t, n.cfgPath, n.config(good))
	d := n.daemon()
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool {
		return d.Status().Serial == 1 && healthServes() && openflowServes("127.0.0.1:6653") && listens("10.1.0.2:9877")
	})
	before := n.hostItems()
	if !strings.Contains(before, "100000") || !strings.Contains(before, "table ip "+tuning.SteeringTable) {
		t.Fatalf("host items after start-up:\n%s", before)
	}
	// One line per relay start: the daemon logged its own beside the
	// relay's (helper-81).
	if got := strings.Count(n.logs.String(), `msg="relay started"`); got != 1 {
		t.Errorf("one relay started, logged %d times:\n%s", got, n.logs.String())
	}

	takenData, err := net.Listen("tcp", "10.1.0.2:9977")
	testsupport.RequireNoError(t, err)
	defer takenData.Close()
	takenCtl, err := net.Listen("tcp", "127.0.0.1:6753")
	testsupport.RequireNoError(t, err)
	defer takenCtl.Close()

	var fails uint64
	for _, tc := range []struct {
		name string
		edit reloadEdit
		want string
	}{
		{"relay listener on a taken port", reloadEdit{rmemMax: "200000", controllerPort: 6653, dataPort: 9977}, "address already in use"},
		{"controller on a taken port", reloadEdit{rmemMax: "200000", controllerPort: 6753, dataPort: 9877}, "address already in use"},
		{"relay refuses its config", reloadEdit{rmemMax: "200000", controllerPort: 6653, dataPort: 9877,
			tuningExtra: `congestion_control = "sosnosuchcc"`}, "sosnosuchcc"},
	} {
		writeFile(t, n.cfgPath, n.config(tc.edit))
		// os.WriteFile truncates first: on a loaded machine the watcher
		// may settle on the empty file and refuse it (one more failed
		// reload) before the edit's own reload fails.
		var st Status
		testsupport.Eventually(t, 15*time.Second, fmt.Sprintf("%s: a failed reload that says %q", tc.name, tc.want), func() bool {
			st = d.Status()
			return st.ReloadFails > fails && st.LastReload != nil && strings.Contains(st.LastReload.Result, tc.want)
		})
		fails = st.ReloadFails
		if after := n.hostItems(); after != before {
			t.Errorf("%s: host items changed:\n%s\nwere\n%s", tc.name, after, before)
		}
		if !healthServes() || !listens("10.1.0.2:9877") || !openflowServes("127.0.0.1:6653") {
			t.Errorf("%s: the old relay or controller stopped serving", tc.name)
		}
		if st.Serial != 1 || len(st.Agents) == 0 {
			t.Errorf("%s: status %+v", tc.name, st)
		}
	}

	// A good reload moves both listeners: the new ones serve, the old
	// ones are closed.
	takenData.Close()
	takenCtl.Close()
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "300000", controllerPort: 6753, dataPort: 9977}))
	testsupport.Eventually(t, 15*time.Second, "good reload", func() bool {
		st := d.Status()
		return st.LastReload != nil && st.LastReload.Result == "ok"
	})
	if !strings.Contains(n.hostItems(), "300000") || !listens("10.1.0.2:9977") || !openflowServes("127.0.0.1:6753") {
		t.Errorf("good reload not in force:\n%s", n.hostItems())
	}
	if listens("10.1.0.2:9877") || listens("127.0.0.1:6653") {
		t.Error("old listeners still open after a good reload")
	}
}

// TestFailingStartUpUnwinds: start-up is the same switch as a reload, from
// nothing. When the controller cannot listen, the relay that had started
// is stopped again, its ports are free and the host items are untouched.
func TestFailingStartUpUnwinds(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	taken, err := net.Listen("tcp", "127.0.0.1:6653")
	testsupport.RequireNoError(t, err)
	defer taken.Close()
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}))
	before := n.hostItems()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = n.daemon().Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run = %v, want the controller's listen error", err)
	}
	if !strings.Contains(n.logs.String(), "relay stopped") {
		t.Errorf("the started relay was not stopped:\n%s", n.logs.String())
	}
	for _, addr := range []string{"10.1.0.2:9877", "0.0.0.0:9876", "10.1.0.2:9878"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still held after the failed start-up: %v", addr, err)
			continue
		}
		ln.Close()
	}
	if after := n.hostItems(); after != before {
		t.Errorf("host items changed:\n%s\nwere\n%s", after, before)
	}
}
