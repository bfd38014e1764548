package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// twoSiteFile is a valid two-site file whose agents run on host-a1 and
// host-b1; agentA is spliced into agent a1, extra at the end.
func twoSiteFile(psk, agentA, extra string) string {
	return fmt.Sprintf(`security { psk_file = %q }
site "a" {
  prefixes = ["10.1.0.0/24"]
  agent "a1" {
    node        = "host-a1"
    switch      = "sa"
    switch_port = 2
    mac         = "02:00:00:00:0a:02"
    address     = "10.1.0.2"
    interface   = "eth1"
%s
  }
  switch "sa" { datapath_id = "00:00:00:00:00:00:0a:01" }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sb" { datapath_id = "00:00:00:00:00:00:0b:01" }
  agent "b1" {
    node        = "host-b1"
    switch      = "sb"
    switch_port = 2
    mac         = "02:00:00:00:0b:02"
    address     = "10.2.0.2"
    interface   = "eth1"
  }
}
controller { node = "ctl" }
whitelist "w" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.10"
  server_port = 5201
}
%s
`, psk, agentA, extra)
}

// typoInClients is a file a typo away from a good one: the clients'
// prefix lies in no site and client_agents names agents that do not exist.
const typoInClients = `
whitelist "w2" {
  clients       = ["10.9.0.0/24"]
  client_agents = ["a1x", "a2x"]
  server        = "10.2.0.11"
  server_port   = 5202
}
`

var fileLinePos = regexp.MustCompile(`sos\.hcl:\d+:\d+`)

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	testsupport.RequireNoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func headLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}

// tuningNode is a node the tests run `sosappliance run` on: a temp tree
// whose rmem_max is 212992, where its file (cfg, hostTuningFile), state
// and control socket live.
type tuningNode struct {
	dir, root, cfg, socket string
}

func newTuningNode(t *testing.T) tuningNode {
	t.Helper()
	dir := t.TempDir()
	n := tuningNode{dir: dir, root: filepath.Join(dir, "root"), cfg: filepath.Join(dir, "sos.hcl"), socket: filepath.Join(dir, "control.sock")}
	testsupport.WriteTree(t, n.root, map[string]string{"proc/sys/net/core/rmem_max": "212992\n"})
	return n
}

// run starts `sosappliance run` on the node's file, state and socket,
// with the drift interval drift.
func (n tuningNode) run(t *testing.T, drift string) *testsupport.Daemon {
	t.Helper()
	return testsupport.StartDaemon(t, testsupport.Command(t, mainChild, "run", "-c", n.cfg, "--node", "host1",
		"--state", filepath.Join(n.dir, "state.db"), "--control-socket", n.socket,
		"--root", n.root, "--metrics-listen", "", "--drift-interval", drift, "--settle", "50ms"))
}

// hostTuningFile is a node that only tunes one sysctl, over a temp tree.
func hostTuningFile(rmem, daemonBlock string) string {
	return `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.rmem_max" = "` + rmem + `" } }
node "host1" { tuning = ["t"] }
` + daemonBlock
}

func rmemMaxIn(t *testing.T, root string) string {
	b, _ := os.ReadFile(filepath.Join(root, "proc/sys/net/core/rmem_max"))
	return strings.TrimSpace(string(b))
}

// TestValidateTypoNoPanic runs the real CLI (the test binary as
// `sosappliance`) on a file with a typo (typoInClients). Before, validate
// panicked (exit 2, a Go stack); now it exits 1 with a file:line
// diagnostic. Found by review (helper-58).
func TestValidateTypoNoPanic(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sos.hcl")
	writeConfig(t, cfg, twoSiteFile("/etc/sosappliance/psk", "", typoInClients))
	cmd := testsupport.Command(t, mainChild, "validate", "-c", cfg)
	out, err := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if code != 1 || !fileLinePos.Match(out) || strings.Contains(string(out), "panic") {
		t.Errorf("validate: exit %d (err %v), want 1 with file:line problems; output:\n%s", code, err, headLines(string(out), 12))
	}
}

// TestStatusWithTypoFile: status reads the file only for the control
// socket's path and falls back to the default when the file is bad;
// before, with this file it crashed instead. (rollback with --state does
// not read the file; without --state it would, the same way, but that
// case would open the system's default state path, so it is not run.)
// Found by review (helper-58).
func TestStatusWithTypoFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sos.hcl")
	writeConfig(t, cfg, twoSiteFile("/etc/sosappliance/psk", "", typoInClients))
	for _, args := range [][]string{
		{"status", "-c", cfg, "--json"},
	} {
		cmd := testsupport.Command(t, mainChild, args...)
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), "panic:") {
			t.Errorf("%s: exit %d, crashed on the file it only reads for a path:\n%s", args[0], cmd.ProcessState.ExitCode(), headLines(string(out), 8))
		}
	}
}

// TestRunSurvivesAFileThatPanickedTheValidator: `sosappliance run` with
// a good file, then an edit with the typo that panicked the validator.
// Before, the reload panicked and the daemon exited, its relays, its
// controller and its status with it. Now the daemon keeps running the
// last good config, reports the refusal in status with its file:line,
// and takes the next good edit. (With the validator's fix taken out, the
// daemon still survives, by compile's recover, and its status names the
// bug: TestCompilePanicIsAFailedLoad.) Found by review (helper-58).
func TestRunSurvivesAFileThatPanickedTheValidator(t *testing.T) {
	n := newTuningNode(t)
	root, cfg, socket := n.root, n.cfg, n.socket
	writeConfig(t, cfg, hostTuningFile("100000", ""))
	d := n.run(t, "1h")
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, root) == "100000" })

	bad := hostTuningFile("100000", "") + `
site "b" { prefixes = ["10.2.0.0/24"] }
whitelist "w" {
  clients       = ["10.9.0.0/24"]
  client_agents = ["a1x", "a2x"]
  server        = "10.2.0.11"
}
`
	writeConfig(t, cfg, bad)
	var st *appliance.Status
	testsupport.Eventually(t, converges, "the bad edit refused, or the daemon gone", func() bool {
		select {
		case <-d.Done():
			return true
		default:
		}
		s, err := appliance.FetchStatus(context.Background(), socket)
		if err == nil && s.ReloadFails > 0 {
			st = s
			return true
		}
		return false
	})
	select {
	case <-d.Done():
		t.Fatalf("a bad edit killed the daemon (%v); the node's relays, controller and status went with it:\n%s",
			d.Err(), headLines(d.Output.String(), 40))
	default:
	}
	if len(st.LastReload.Problems) == 0 || !fileLinePos.MatchString(st.LastReload.Problems[0]) {
		t.Errorf("status does not say where the problem is: %+v", st.LastReload)
	}
	writeConfig(t, cfg, hostTuningFile("300000", ""))
	testsupport.Eventually(t, converges, "the next good edit", func() bool { return rmemMaxIn(t, root) == "300000" })
}

// TestReloadOfTheDaemonBlock: `run` without --state and
// --control-socket, so the file's daemon block decides them. Before, an
// edit of state_path, control_socket and drift_interval reloaded "ok",
// but the control socket stayed where it was (`status -c FILE` could not
// reach the daemon, and `apply` would take the node for one without a
// daemon), the drift interval stayed the old one, and the state moved to
// a fresh database whose records held the appliance's own value as the
// one from before: a rollback with the file put back 100000, not the
// node's 212992. Now the daemon refuses an edit of what it takes only at
// start, names each and says what to do, and keeps running the last good
// config; an edit of the drift interval alone takes effect. Found by
// review (helper-58).
func TestReloadOfTheDaemonBlock(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/rmem_max": "212992\n"})
	cfg := filepath.Join(dir, "sos.hcl")
	block := func(n int, drift string) string {
		return fmt.Sprintf(`daemon {
  state_path     = %q
  control_socket = %q
  drift_interval = %q
}
`, filepath.Join(dir, fmt.Sprintf("state%d.db", n)), filepath.Join(dir, fmt.Sprintf("ctl%d.sock", n)), drift)
	}
	writeConfig(t, cfg, hostTuningFile("100000", block(1, "1h")))
	d := testsupport.StartDaemon(t, testsupport.Command(t, mainChild, "run", "-c", cfg, "--node", "host1",
		"--root", root, "--metrics-listen", "", "--settle", "50ms"))
	sock1 := filepath.Join(dir, "ctl1.sock")
	testsupport.Eventually(t, converges, "first convergence", func() bool {
		st, err := appliance.FetchStatus(context.Background(), sock1)
		return err == nil && st.Serial == 1 && rmemMaxIn(t, root) == "100000"
	})
	reloaded := func(n uint64) *appliance.Status {
		var st *appliance.Status
		testsupport.Eventually(t, converges, "the edit reloaded", func() bool {
			s, err := appliance.FetchStatus(context.Background(), sock1)
			if err == nil && s.Reloads >= n {
				st = s
				return true
			}
			return false
		})
		return st
	}

	writeConfig(t, cfg, hostTuningFile("200000", block(2, "5m")))
	st := reloaded(1)
	t.Logf("after moving the paths: reload %q, drift interval %s, rmem_max %s", st.LastReload.Result, st.Drift.Interval, rmemMaxIn(t, root))
	for _, want := range []string{"daemon.state_path", "state1.db", "daemon.control_socket", "ctl1.sock"} {
		if !strings.Contains(st.LastReload.Result, want) {
			t.Errorf("the refusal does not name %s: %q", want, st.LastReload.Result)
		}
	}
	if st.ReloadFails != 1 || rmemMaxIn(t, root) != "100000" || st.Drift.Interval != "1h0m0s" {
		t.Errorf("an edit moving the daemon's paths was taken: %d failed reloads, rmem_max %s, drift interval %s",
			st.ReloadFails, rmemMaxIn(t, root), st.Drift.Interval)
	}

	writeConfig(t, cfg, hostTuningFile("200000", block(1, "5m")))
	st = reloaded(2)
	t.Logf("after the paths went back: reload %q, drift interval %s, rmem_max %s", st.LastReload.Result, st.Drift.Interval, rmemMaxIn(t, root))
	if st.LastReload.Result != "ok" || st.Drift.Interval != "5m0s" || rmemMaxIn(t, root) != "200000" {
		t.Errorf("the edit of the drift interval and a sysctl was not taken")
	}
	if code, _, errOut := runCLI(t, "status", "-c", cfg); code != 0 {
		t.Errorf("`status -c FILE` cannot reach the daemon: %s", strings.TrimSpace(errOut))
	}

	// Stop the daemon, then roll back as an operator would, with the file.
	testsupport.RequireNoError(t, d.Cmd.Process.Signal(syscall.SIGTERM))
	<-d.Done()
	code, out, errOut := runCLI(t, "rollback", "-c", cfg, "--node", "host1", "--root", root, "--auto-approve")
	if got := rmemMaxIn(t, root); got != "212992" {
		t.Errorf("rollback (exit %d) left rmem_max at %s, want the value before the appliance, 212992:\n%s%s", code, got, out, errOut)
	}
}

// TestValidateDeeplyNestedFile: a file under MaxFileSize made of deeply
// nested brackets. The HCL parser recurses once per level; before,
// validate ended in "fatal error: stack overflow" (exit 2, after 9 s and
// 1 GB), which no recover catches, so a daemon would have died on
// reloading it too. Now it is refused before parsing, at its line and
// column. Found by review (helper-58).
func TestValidateDeeplyNestedFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sos.hcl")
	depth := 1 << 20
	writeConfig(t, cfg, "security { psk_file = \"/p\" }\nx = "+strings.Repeat("[", depth)+strings.Repeat("]", depth)+"\n")
	cmd := testsupport.Command(t, mainChild, "validate", "-c", cfg)
	out, _ := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if code != 1 || !fileLinePos.Match(out) {
		t.Errorf("validate of %d nested brackets: exit %d, output:\n%s", depth, code, headLines(string(out), 6))
	}
}

// TestValidateRefusesWhatPlanOrRunWould: files validate called valid,
// which plan or run on agent a1's node then refused, with an error that
// named no place in the file: a health_listen of a name or an empty host,
// two tunings of one node setting a sysctl or relay_cpus differently, a
// tuning setting the rp_filter steering sets on the agent's interface
// (plan: "desired twice"), an agent named "", relay_cpus past 1023 (run:
// the relay refused its spec). Now validate refuses each, naming the
// place. Found by review (helper-58).
func TestValidateRefusesWhatPlanOrRunWould(t *testing.T) {
	psk := "/etc/sosappliance/psk"
	cases := map[string]struct{ src, says string }{
		"health_listen localhost": {twoSiteFile(psk, `    health_listen = "localhost:9878"`, ""), "is not an IP address and port"},
		"health_listen :port":     {twoSiteFile(psk, `    health_listen = ":9878"`, ""), "is not an IP address and port"},
		"two tunings disagree": {twoSiteFile(psk, `    tuning = ["t1", "t2"]`, `
tuning "t1" { sysctl = { "net.core.rmem_max" = "100000" } }
tuning "t2" { sysctl = { "net.core.rmem_max" = "200000" } }
`), "one node takes one value"},
		"node and agent tunings disagree": {twoSiteFile(psk, `    tuning = ["t1"]`, `
tuning "t1" { relay_cpus = "1" }
tuning "t2" { relay_cpus = "2" }
node "host-a1" { tuning = ["t2"] }
`), "one node takes one value"},
		"tuning sets steering's rp_filter": {twoSiteFile(psk, `    tuning = ["t"]`, `tuning "t" { sysctl = { "net.ipv4.conf.eth1.rp_filter" = "1" } }`),
			"steering needs \"2\" on its interface eth1"},
		"empty agent name": {strings.Replace(twoSiteFile(psk, "", ""), `agent "b1"`, `agent ""`, 1), "not a valid handshake identity"},
		"relay_cpus 1500":  {twoSiteFile(psk, `    tuning = ["t"]`, `tuning "t" { relay_cpus = "1500" }`), "beyond those the relay can pin itself to"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "sos.hcl")
			writeConfig(t, cfg, c.src)
			code, out, errOut := runCLI(t, "validate", "-c", cfg)
			t.Logf("validate (exit %d): %s%s", code, out, errOut)
			if code != 1 || !fileLinePos.MatchString(errOut) || !strings.Contains(errOut, c.says) {
				t.Errorf("validate: exit %d, want 1 with a file:line:col saying %q", code, c.says)
			}
		})
	}
}

// TestReloadSamePathsSpelledOtherwise: the first restartOnlyChanged
// compared daemon.state_path and control_socket as strings. An edit that
// wrote the same files otherwise ("dir/./state.db", a doubled slash)
// named the very database and socket the daemon opened, yet the reload
// was refused and the rest of the edit (here a sysctl) not taken. Paths
// are compared clean now. Found by review (helper-60).
func TestReloadSamePathsSpelledOtherwise(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/rmem_max": "212992\n"})
	cfg := filepath.Join(dir, "sos.hcl")
	sock := filepath.Join(dir, "ctl.sock")
	block := func(state, socket string) string {
		return fmt.Sprintf("daemon {\n  state_path     = %q\n  control_socket = %q\n  drift_interval = \"1h\"\n}\n", state, socket)
	}
	writeConfig(t, cfg, hostTuningFile("100000", block(filepath.Join(dir, "state.db"), sock)))
	d := testsupport.StartDaemon(t, testsupport.Command(t, mainChild, "run", "-c", cfg, "--node", "host1",
		"--root", root, "--metrics-listen", "", "--settle", "50ms"))
	_ = d
	testsupport.Eventually(t, converges, "first convergence", func() bool {
		st, err := appliance.FetchStatus(context.Background(), sock)
		return err == nil && st.Serial == 1 && rmemMaxIn(t, root) == "100000"
	})
	writeConfig(t, cfg, hostTuningFile("200000", block(dir+"/./state.db", dir+"//ctl.sock")))
	var st *appliance.Status
	testsupport.Eventually(t, converges, "the edit reloaded", func() bool {
		s, err := appliance.FetchStatus(context.Background(), sock)
		if err == nil && s.Reloads >= 1 {
			st = s
			return true
		}
		return false
	})
	if st.LastReload.Result != "ok" || rmemMaxIn(t, root) != "200000" {
		t.Errorf("an edit naming the same state database and socket was refused: %q; rmem_max %s", st.LastReload.Result, rmemMaxIn(t, root))
	}
}

// TestDriftIntervalFlagHasAFloor: the file's drift_interval is refused
// under 1 s ("1ns: convergence without pause"), but `run
// --drift-interval`, which overrides it, took 1ns. It is refused too now.
// Found by review (helper-60).
func TestDriftIntervalFlagHasAFloor(t *testing.T) {
	n := newTuningNode(t)
	sock := n.socket
	writeConfig(t, n.cfg, hostTuningFile("100000", ""))
	d := n.run(t, "1ns")
	var st *appliance.Status
	testsupport.Eventually(t, converges, "the daemon up, or refused", func() bool {
		select {
		case <-d.Done():
			return true
		default:
		}
		s, err := appliance.FetchStatus(context.Background(), sock)
		if err == nil && s.Serial >= 1 {
			st = s
			return true
		}
		return false
	})
	if st != nil {
		t.Errorf("run took --drift-interval 1ns: status drift interval %q", st.Drift.Interval)
	} else if out := d.Output.String(); !strings.Contains(out, "--drift-interval 1ns: at least 1s") {
		t.Errorf("run refused --drift-interval 1ns without saying why:\n%s", out)
	}
}

// TestRunSurvivesNestingPastTheCount: `sosappliance run` with a good
// file, then an edit nesting 100,000 brackets whose closers sit in
// strings ("]" inside ["]", [...]). The first tooDeep counted each
// string's ']' as a closer and let the file through to the parser, whose
// stack overflow no recover catches: the daemon died on the reload, its
// relays and controller with it. Now the edit is refused and the daemon
// keeps running. Found by review (helper-60).
func TestRunSurvivesNestingPastTheCount(t *testing.T) {
	n := newTuningNode(t)
	root, cfg, socket := n.root, n.cfg, n.socket
	writeConfig(t, cfg, hostTuningFile("100000", ""))
	d := n.run(t, "1h")
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, root) == "100000" })

	const deep = 100000
	writeConfig(t, cfg, hostTuningFile("100000", "")+"x = "+strings.Repeat(`["]",`, deep)+"1"+strings.Repeat("]", deep)+"\n")
	testsupport.Eventually(t, converges, "the deep edit refused, or the daemon gone", func() bool {
		select {
		case <-d.Done():
			return true
		default:
		}
		s, err := appliance.FetchStatus(context.Background(), socket)
		return err == nil && s.ReloadFails > 0
	})
	select {
	case <-d.Done():
		out := d.Output.String()
		if i := strings.Index(out, "fatal error"); i >= 0 {
			out = out[max(0, i-400):min(len(out), i+200)]
		}
		t.Fatalf("the edit killed the daemon (%v):\n%s", d.Err(), headLines(out, 12))
	default:
	}
}
