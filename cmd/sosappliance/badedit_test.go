package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/rmem_max": "212992\n"})
	cfg := filepath.Join(dir, "sos.hcl")
	socket := filepath.Join(dir, "control.sock")
	writeConfig(t, cfg, hostTuningFile("100000", ""))
	d := testsupport.StartDaemon(t, testsupport.Command(t, mainChild, "run", "-c", cfg, "--node", "host1",
		"--state", filepath.Join(dir, "state.db"), "--control-socket", socket,
		"--root", root, "--metrics-listen", "", "--drift-interval", "1h", "--settle", "50ms"))
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
