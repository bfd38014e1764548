package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// mainChild is the child that runs the CLI with its arguments, so a test
// can run `sosappliance run` inside another network namespace and kill it
// with SIGKILL.
const mainChild = "sosappliance"

func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.Children{mainChild: run, exitRecordingChild: runRecordingExit})
}

func controllerConfig(port, healthPort int, whitelistPort int) string {
	return fmt.Sprintf(`
controller {
  node      = "ctl"
  listen    = "127.0.0.1:%d"
  keepalive = "1s"
  health_interval = "300ms"
}
security { psk_file = "/etc/sosappliance/psk" }
daemon { drift_interval = "1s" }
site "a" {
  prefixes = ["10.20.1.0/24"]
  switch "sw" { datapath_id = "00:00:00:00:00:00:5a:01" }
  agent "agent-a" {
    node = "na"
    switch = "sw"
    switch_port = 2
    mac = "02:00:00:00:5a:02"
    address = "10.20.1.2"
    interface = "eth0"
    health_listen = "127.0.0.1:%d"
  }
}
site "b" {
  prefixes = ["10.20.2.0/24"]
  agent "agent-b" {
    node = "nb"
    switch = "swb"
    switch_port = 2
    mac = "02:00:00:00:5b:02"
    address = "10.20.2.2"
    interface = "eth0"
    health_listen = "127.0.0.1:%d"
  }
  switch "swb" { datapath_id = "00:00:00:00:00:00:5b:01" }
}
whitelist "w" {
  clients     = ["10.20.1.0/24"]
  server      = "10.20.2.10"
  server_port = %d
}
`, port, healthPort, healthPort, whitelistPort)
}

// ownedFlows dumps the flows carrying our cookie prefix.
func ownedFlows(t *testing.T, br *ovstest.Bridge) map[string]ovstest.DumpedFlow {
	t.Helper()
	dumped, err := br.DumpFlows()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ovstest.DumpedFlow{}
	for _, f := range dumped {
		if flows.Owned(f.Cookie) {
			out[f.Key()] = f
		}
	}
	return out
}

// converges bounds the wait for the daemon to act; it only keeps a broken
// test from hanging.
const converges = 30 * time.Second

// TestControllerNodeDaemon runs `sosappliance run` as the controller node of
// a real Open vSwitch bridge: flows converge, `plan` reads them through the
// daemon, a flow deleted behind its back is repaired within a drift period,
// and kill -9 plus restart sends no flow mods (durations keep counting).
func TestControllerNodeDaemon(t *testing.T) {
	t.Parallel() // its own daemons, files and namespaces; mostly waiting (see the Makefile's -parallel)
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	health, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })}
	go healthSrv.Serve(health)
	t.Cleanup(func() { healthSrv.Close() })
	healthPort := health.Addr().(*net.TCPAddr).Port

	br := inst.AddBridge(t, ovstest.UniqueName("sw"), 0x5a01, fmt.Sprintf("tcp:127.0.0.1:%d", port))
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	if err := os.WriteFile(cfgPath, []byte(controllerConfig(port, healthPort, 5201)), 0o644); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "control.sock")
	common := []string{"-c", cfgPath, "--node", "ctl", "--state", filepath.Join(dir, "state.db"), "--control-socket", socket}
	startDaemon := func() *testsupport.Daemon {
		args := append([]string{"run", "--metrics-listen", ""}, common...)
		return testsupport.StartDaemon(t, testsupport.CommandInNetns(t, inst.Namespace, mainChild, args...))
	}
	daemon := startDaemon()
	// Bypass for the agent port, the client-side steer, and NORMAL.
	testsupport.Eventually(t, converges, "flows installed", func() bool { return len(ownedFlows(t, br)) == 3 })
	before := ownedFlows(t, br)

	// Switch swb never dials in: what it needs is unknown, so not
	// "nothing to do" (0) but 1.
	code, out, errOut := runCLI(t, append([]string{"plan", "-detailed-exitcode"}, common...)...)
	if code != 1 || !strings.Contains(out, "flows on switch sw") || !strings.Contains(out, "(no changes)") ||
		!strings.Contains(errOut, "not every switch could be read") {
		t.Fatalf("plan with converged flows on sw, swb not connected: exit %d\n%s%s", code, out, errOut)
	}

	// A flow deleted on the switch comes back within a drift period.
	var steer ovstest.DumpedFlow
	for _, f := range before {
		if flows.CookieKind(f.Cookie) == flows.KindSteerClient {
			steer = f
		}
	}
	if steer.Cookie == 0 {
		t.Fatalf("no client steering flow among %v", before)
	}
	if _, err := br.Ofctl("del-flows", "--strict", fmt.Sprintf("table=%d,priority=%d,%s", steer.Table, steer.Priority, steer.Match)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, converges, "deleted flow repaired", func() bool { _, ok := ownedFlows(t, br)[steer.Key()]; return ok })
	testsupport.Eventually(t, converges, "repair counted as drift", func() bool {
		st, err := appliance.FetchStatus(context.Background(), socket)
		return err == nil && st.Drift.ByKind["flows"] >= 1
	})

	// kill -9 and restart: the flows stay and are not touched again.
	before = ownedFlows(t, br)
	daemon.Cmd.Process.Signal(syscall.SIGKILL)
	<-daemon.Done()
	time.Sleep(time.Second)
	startDaemon()
	testsupport.Eventually(t, converges, "restarted controller connected", func() bool {
		st, err := appliance.FetchStatus(context.Background(), socket)
		return err == nil && len(st.Switches) > 0 && st.Switches[0].Connected && st.Switches[0].Flows == 3
	})
	after := ownedFlows(t, br)
	if len(after) != len(before) {
		t.Fatalf("flows changed across restart: %v -> %v", before, after)
	}
	for key, f := range after {
		b, ok := before[key]
		if !ok || b.Cookie != f.Cookie || f.Duration < b.Duration+time.Second {
			t.Errorf("flow %s was replaced across the restart: before %v, after %v", key, b.Duration, f.Duration)
		}
	}

	// Editing the whitelist port replaces only the steering flow.
	if err := os.WriteFile(cfgPath, []byte(controllerConfig(port, healthPort, 5202)), 0o644); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, converges, "new whitelist port steered", func() bool {
		for _, f := range ownedFlows(t, br) {
			if strings.Contains(f.Match, "tp_dst=5202") {
				return true
			}
		}
		return false
	})
	edited := ownedFlows(t, br)
	for key, f := range edited {
		if flows.CookieKind(f.Cookie) == flows.KindSteerClient {
			continue
		}
		if b, ok := before[key]; !ok || f.Duration < b.Duration {
			t.Errorf("flow %s not kept across the edit", key)
		}
	}
}

// TestControllerNodePlanApplyWithoutDaemon plans and applies the flows of
// two switches that listen (connect = "tcp:..."), with no daemon running:
// the plan lists typed flow changes per switch in text and JSON, refuses
// -out while flows must change, and apply converges the switches once.
func TestControllerNodePlanApplyWithoutDaemon(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	ports := make([]int, 3)
	for i := range ports {
		p := inst.FreePort(t)
		ports[i] = p
	}
	ctlPort, portA, portB := ports[0], ports[1], ports[2]
	brA := inst.AddBridge(t, ovstest.UniqueName("sw"), 0x5a01, fmt.Sprintf("ptcp:%d:127.0.0.1", portA))
	brB := inst.AddBridge(t, ovstest.UniqueName("swb"), 0x5b01, fmt.Sprintf("ptcp:%d:127.0.0.1", portB))
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeCfg := func(whitelistPort int) {
		src := controllerConfig(ctlPort, 1, whitelistPort)
		src = strings.Replace(src, `switch "sw" { datapath_id = "00:00:00:00:00:00:5a:01" }`,
			fmt.Sprintf(`switch "sw" {
    datapath_id = "00:00:00:00:00:00:5a:01"
    connect     = "tcp:127.0.0.1:%d"
  }`, portA), 1)
		src = strings.Replace(src, `switch "swb" { datapath_id = "00:00:00:00:00:00:5b:01" }`,
			fmt.Sprintf(`switch "swb" {
    datapath_id = "00:00:00:00:00:00:5b:01"
    connect     = "tcp:127.0.0.1:%d"
  }`, portB), 1)
		testsupport.RequireNoError(t, os.WriteFile(cfgPath, []byte(src), 0o644))
	}
	writeCfg(5201)
	common := []string{"-c", cfgPath, "--node", "ctl", "--state", filepath.Join(dir, "state.db"),
		"--control-socket", filepath.Join(dir, "no-daemon.sock")}
	// The CLI runs in the switches' namespace, where their ptcp: ports are.
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := testsupport.CommandInNetns(t, inst.Namespace, mainChild, append(args, common...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}

	var code int
	var out, errOut string
	// The bridges take a moment to listen.
	testsupport.Eventually(t, converges, "both switches read", func() bool {
		code, out, errOut = cli("plan", "-detailed-exitcode")
		return code == 2 && !strings.Contains(out, "! ")
	})
	for _, want := range []string{
		"flows on switch sw (datapath 00:00:00:00:00:00:5a:01)",
		"flows on switch swb (datapath 00:00:00:00:00:00:5b:01)",
		"    + table=0,priority=",
		"tp_dst=5201: (absent) -> cookie=0x5053",
		"# whitelist w client side via agent agent-a: not on the switch",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = cli("plan", "-json")
	if code != 0 {
		t.Fatalf("plan -json: exit %d %s", code, errOut)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("plan -json: %v\n%s", err, out)
	}
	if p.FormatVersion != plan.FormatVersion || p.Node != "ctl" || p.Lineage == "" || len(p.Switches) != 2 ||
		p.Switches[0].Switch != "sw" || p.Switches[1].Switch != "swb" {
		t.Fatalf("plan -json header and switches: %s", out)
	}
	planned := map[string]int{}
	for _, sp := range p.Switches {
		if !sp.Connected || sp.Error != "" || len(sp.Changes) == 0 {
			t.Errorf("switch %s: %+v", sp.Switch, sp)
		}
		for _, c := range sp.Changes {
			if c.Action != plan.Add || c.Before != nil || c.After == nil || !strings.HasPrefix(c.After.Cookie, "0x5053") || c.Why == "" {
				t.Errorf("switch %s: change %+v", sp.Switch, c)
			}
		}
		planned[sp.Switch] = len(sp.Changes)
	}

	planFile := filepath.Join(dir, "saved.plan")
	code, _, errOut = cli("plan", "-out", planFile)
	wantRefusal := fmt.Sprintf("a plan file holds host changes only, and the plan changes the flows of switch sw (%d), swb (%d)", planned["sw"], planned["swb"])
	if code != 1 || !strings.Contains(errOut, wantRefusal) {
		t.Fatalf("plan -out with flow changes: exit %d %q, want %q", code, errOut, wantRefusal)
	}
	if _, err := os.Stat(planFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused plan was saved: %v", err)
	}

	code, out, errOut = cli("apply", "-auto-approve")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("Switch sw: %d flow mod(s) sent.", planned["sw"])) ||
		!strings.Contains(out, fmt.Sprintf("Switch swb: %d flow mod(s) sent.", planned["swb"])) {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if len(ownedFlows(t, brA)) != planned["sw"] || len(ownedFlows(t, brB)) != planned["swb"] {
		t.Fatalf("after apply: %v, %v", ownedFlows(t, brA), ownedFlows(t, brB))
	}
	code, out, errOut = cli("plan", "-detailed-exitcode")
	if code != 0 || strings.Count(out, "(no changes)") != 2 {
		t.Fatalf("plan after apply: exit %d\n%s%s", code, out, errOut)
	}
	// Converged switches do not stop a plan file, which then holds them
	// with nothing to do.
	if code, _, errOut := cli("plan", "-out", planFile); code != 0 {
		t.Fatalf("plan -out of a converged controller node: exit %d %s", code, errOut)
	}
	if code, out, errOut := cli("apply", planFile); code != 0 || !strings.Contains(out, "The saved plan has no changes.") {
		t.Fatalf("apply of the saved plan: exit %d\n%s%s", code, out, errOut)
	}

	// A new whitelist port: the steering flow on sw is replaced, + and -.
	writeCfg(5202)
	code, out, errOut = cli("plan", "-detailed-exitcode")
	if code != 2 || !regexp.MustCompile(`(?m)^    \+ table=0,priority=\d+,.*tp_dst=5202: \(absent\) -> cookie=`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^    - table=0,priority=\d+,.*tp_dst=5201: cookie=0x5053[0-9a-f]+, actions=.* -> \(absent\)$`).MatchString(out) ||
		!strings.Contains(out, "owned by the appliance (cookie prefix), no longer in the configuration") {
		t.Fatalf("plan after the edit: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("plan after the edit:\n%s", out)
}
