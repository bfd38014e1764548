package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// inPrivateVarLib runs the CLI child under a private mount namespace whose
// /var/lib is an empty tmpfs, so a command that falls back to the default
// state path (/var/lib/sosappliance/state.db) cannot touch the machine's.
func inPrivateVarLib(t *testing.T, args ...string) (int, string) {
	t.Helper()
	testsupport.RequireRoot(t, "unshare", "mount")
	cmd := testsupport.Command(t, mainChild, args...)
	unshare, err := exec.LookPath("unshare")
	testsupport.RequireNoError(t, err)
	cmd.Args = append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs sostest /var/lib && exec "$@"`, "sh", cmd.Path}, args...)
	cmd.Path = unshare
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestSavedPlanAppliesAgainstTheFilesStatePath: a node whose
// sos.hcl sets daemon.state_path. `plan -c FILE -out P` plans against that
// state; `apply P -c FILE` then opens the default state path instead (the
// -c is ignored for a saved plan), creates a fresh database there, and
// refuses the plan as belonging to "another state (lineage ...)". The
// saved-plan workflow the README documents fails on every node that sets
// state_path, and the refusal leaves a new database at
// /var/lib/sosappliance (here inside a private tmpfs). Also: the line plan
// -out prints, "apply it with: sosappliance apply P", leaves out the
// --node the plan was made with, so it is refused as made for another
// node. Now a saved plan opens only an existing database, the file's
// state_path with -c, and plan -out prints the whole command. Found by
// review (helper-81).
func TestSavedPlanAppliesAgainstTheFilesStatePath(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/somaxconn": "128\n"})
	cfg := filepath.Join(dir, "sos.hcl")
	state := filepath.Join(dir, "state", "state.db")
	writeConfig(t, cfg, `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.somaxconn" = "4096" } }
node "host1" { tuning = ["t"] }
daemon { state_path = "`+state+`" }
`)
	planFile := filepath.Join(dir, "saved.plan")
	code, out, errOut := runCLI(t, "plan", "-c", cfg, "--node", "host1", "--root", root, "-out", planFile)
	if code != 0 {
		t.Fatalf("plan -out: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("plan did not use the file's state_path: %v", err)
	}
	if !strings.Contains(out, "--node host1") {
		t.Errorf("plan -out advises a command without the plan's node, which apply refuses (made for node host1, this is node %s):\n%s",
			hostnameOr(t), out)
	}
	code, combined := inPrivateVarLib(t, "apply", planFile, "-c", cfg, "--node", "host1", "--root", root)
	b, _ := os.ReadFile(filepath.Join(root, "proc/sys/net/core/somaxconn"))
	if code != 0 || strings.TrimSpace(string(b)) != "4096" {
		t.Errorf("apply PLANFILE -c FILE (FILE sets daemon.state_path): exit %d, somaxconn %s, want the plan applied against %s:\n%s",
			code, strings.TrimSpace(string(b)), state, combined)
	}
}

func hostnameOr(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}

// TestApplyBesideTheDaemonIsNotUndoneSilently: with the daemon
// running on a state database, `apply -c OTHER` with real changes, on the
// same database, reports "Apply complete" and exits 0; the daemon's next
// drift check puts its own file's values back (seen by hand: "drift
// corrected" within the drift interval). rollback in the same place
// refuses, naming the daemon. apply should refuse its changes the same
// way (or hand them to the daemon), not report a change that is about to
// be reverted. Now apply refuses, naming the daemon's pid. Found by
// review (helper-81).
func TestApplyBesideTheDaemonIsNotUndoneSilently(t *testing.T) {
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	d := n.run(t, "1h")
	t.Cleanup(func() { _ = d.Cmd.Process.Kill() })
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	other := filepath.Join(n.dir, "other.hcl")
	writeConfig(t, other, hostTuningFile("33554432", ""))
	code, out, errOut := runCLI(t, "apply", "--auto-approve", "-c", other, "--node", "host1",
		"--state", filepath.Join(n.dir, "state.db"), "--root", n.root, "--control-socket", n.socket)
	if code != 1 || rmemMaxIn(t, n.root) != "67108864" || !strings.Contains(out+errOut, fmt.Sprintf("pid %d ", d.Cmd.Process.Pid)) {
		t.Errorf("apply with changes beside a running daemon: exit %d, rmem_max %s, want a refusal naming the daemon, whose drift check would put 67108864 back:\n%s%s",
			code, rmemMaxIn(t, n.root), out, errOut)
	}
}

// TestPlanDetailedExitcodeOnUnreadSwitches: on the controller
// node with no daemon and switches that dial in, `plan
// --detailed-exitcode` prints "! not connected" for every switch, then
// "No changes. The host matches the configuration." and exits 0, the code
// that means "nothing to do". A cron job or CI gate reading the code
// takes an unprogrammed fabric for a converged one; plan -out refuses the
// same plan ("could not be read"). Now it exits 1. Found by review
// (helper-81).
func TestPlanDetailedExitcodeOnUnreadSwitches(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sos.hcl")
	writeConfig(t, cfg, twoSiteFile("/etc/sosappliance/psk", "", ""))
	code, out, errOut := runCLI(t, "plan", "--detailed-exitcode", "-c", cfg, "--node", "ctl",
		"--state", filepath.Join(dir, "state.db"), "--root", dir, "--control-socket", filepath.Join(dir, "none.sock"))
	if !strings.Contains(out, "not connected") {
		t.Fatalf("want switches shown as not connected, exit %d:\n%s%s", code, out, errOut)
	}
	if code == 0 {
		t.Errorf("plan --detailed-exitcode with no switch read: exit 0 (nothing to do), want 1 or 2:\n%s", out)
	}
}

// TestStatusFindsTheDaemonWhileItsFileIsBad: the daemon runs
// with daemon.control_socket set in its file; an edit breaks the file and
// the reload is refused. That is when `status` matters (it shows the
// problems under "last reload"), yet `status -c FILE` cannot decode the
// file, silently falls back to /run/sosappliance/control.sock and says "no
// daemon answers", exit 1. Now status reads the socket from the file's
// syntax. Found by review (helper-81).
func TestStatusFindsTheDaemonWhileItsFileIsBad(t *testing.T) {
	n := newTuningNode(t)
	daemon := `daemon { control_socket = "` + n.socket + `" }`
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemon))
	d := n.run(t, "1h")
	t.Cleanup(func() { _ = d.Cmd.Process.Kill() })
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	if code, out, errOut := runCLI(t, "status", "-c", n.cfg); code != 0 {
		t.Fatalf("status with the good file: exit %d\n%s%s", code, out, errOut)
	}
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemon)+"\nwhitelist \"w\" { server_port_typo = 1 }\n")
	testsupport.Eventually(t, converges, "the refused reload", func() bool {
		s := d.Output.String()
		return strings.Contains(s, "reload refused") || strings.Contains(s, "reload failed")
	})
	code, out, errOut := runCLI(t, "status", "-c", n.cfg)
	if code != 0 || !strings.Contains(out, "last reload") {
		t.Errorf("status -c FILE after a refused reload: exit %d, want the daemon's status with its last reload:\n%s%s", code, out, errOut)
	}
}

// TestFailedSysctlRecordDoesNotWedgeApplyAndRollback: in a
// network namespace (a container, the lab's agents) net.core.wmem_max is
// read-only even to root. plan takes "net.core.wmem_max" = "8388608";
// apply fails ("permission denied") but records the item's value from
// before. The operator takes the line out: the plan now shows
// `- net.core.wmem_max: "X" -> "X"  # already at its value from before
// serial 1; forget its record`, yet apply writes X and fails again, and so
// does rollback, at every run: the node is wedged until the state database
// is deleted by hand. An item already at its value from before needs no
// write to forget its record, and now gets none. Found by review
// (helper-81).
func TestFailedSysctlRecordDoesNotWedgeApplyAndRollback(t *testing.T) {
	if !testsupport.InFreshNetns(t) {
		return
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sos.hcl")
	state := filepath.Join(dir, "state.db")
	file := func(sysctl string) string {
		return `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { ` + sysctl + ` } }
node "host1" { tuning = ["t"] }
`
	}
	cli := func(args ...string) (int, string, string) {
		return runCLI(t, append(args, "-c", cfg, "--node", "host1", "--state", state, "--auto-approve")...)
	}
	writeConfig(t, cfg, file(`"net.core.wmem_max" = "8388608"`))
	code, out, errOut := cli("apply")
	t.Logf("apply with wmem_max in this namespace: exit %d\n%s%s", code, out, errOut)
	if code == 0 {
		t.Log("precondition not met on this kernel: net.core.wmem_max is writable in a network namespace")
	}
	writeConfig(t, cfg, file(`"net.ipv4.tcp_fin_timeout" = "30"`))
	code, out, errOut = cli("apply")
	if code != 0 {
		t.Errorf("apply of a file without wmem_max after the failed apply: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli("rollback")
	if code != 0 {
		t.Errorf("rollback after the failed apply: exit %d\n%s%s", code, out, errOut)
	}
}

// TestRefusedReloadSaysWhatIsWrong: an edit with a misspelt
// argument is refused at reload. status (text and --json) and the log then
// give "sos.hcl:L:C: Unsupported argument" and no more: the argument's
// name and the "Did you mean" live in the hint, which is dropped, so the
// operator has to run validate to learn what is wrong. And the log lists
// the file's warnings (a whitelist without ports) as further "reload
// refused" problems at level ERROR, though a warning refuses nothing (the
// same file without the typo reloads). Now the problem carries HCL's
// detail, and warnings are logged as warnings. Found by review
// (helper-81).
func TestRefusedReloadSaysWhatIsWrong(t *testing.T) {
	n := newTuningNode(t)
	daemon := `daemon { control_socket = "` + n.socket + `" }`
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemon))
	d := n.run(t, "1h")
	t.Cleanup(func() { _ = d.Cmd.Process.Kill() })
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemon)+`
site "b" { prefixes = ["10.2.0.0/24"] }
whitelist "w" {
  clients = ["10.1.0.0/24"]
  server  = "10.2.0.10"
  sever_port = 5201
}
`)
	testsupport.Eventually(t, converges, "the refused reload", func() bool {
		return strings.Contains(d.Output.String(), "reload refused")
	})
	code, out, errOut := runCLI(t, "status", "--control-socket", n.socket)
	if code != 0 || !strings.Contains(out, "last reload") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "sever_port") {
		t.Errorf("status after a reload refused for a misspelt argument does not name it:\n%s", out)
	}
	for _, l := range strings.Split(d.Output.String(), "\n") {
		if strings.Contains(l, "reload refused") && strings.Contains(l, "lists no ports") {
			t.Errorf("a warning logged as a reason the reload was refused, at ERROR:\n%s", l)
		}
	}
}

// TestValidateThisNodeChecksTheAgentsKeyFile: `validate
// --this-node` is what the packages run to decide "whether the daemon can
// start on the file" (postinst's valid()). On an agent's node whose
// psk_file is missing, or mode 0644, it exits 0 ("is valid"); plan and
// apply exit 0 too; only `run` then fails ("psk_file: lstat ...: no such
// file or directory", "is mode 0644; ... (chmod 600)"), after the
// package restarted the daemon onto the file. Now --this-node reads
// them as run does. Found by review (helper-81).
func TestValidateThisNodeChecksTheAgentsKeyFile(t *testing.T) {
	host, err := os.Hostname()
	testsupport.RequireNoError(t, err)
	dir := t.TempDir()
	loose := filepath.Join(dir, "psk-0644")
	testsupport.RequireNoError(t, os.WriteFile(loose, []byte(strings.Repeat("ab", 32)+"\n"), 0o644))
	testsupport.RequireNoError(t, os.Chmod(loose, 0o644))
	for _, psk := range []string{filepath.Join(dir, "missing-psk"), loose} {
		cfg := filepath.Join(dir, "sos.hcl")
		file := strings.Replace(twoSiteFile(psk, "", ""), `node        = "host-a1"`, `node        = "`+host+`"`, 1)
		writeConfig(t, cfg, file)
		code, out, errOut := runCLI(t, "validate", "--this-node", "-c", cfg)
		if code == 0 {
			t.Errorf("validate --this-node on agent a1's node with psk_file %s: exit 0, though run refuses to start on it:\n%s%s", psk, out, errOut)
		}
	}
}

// TestStatusFindsTheDaemonWhileItsFileDoesNotParse: the README
// says a refused reload leaves the last good config running and that
// `status` shows why under "last reload", with the refused file's
// problems at file:line:col. A daemon whose file names its own
// control_socket is found by `status -c FILE` while the file validates
// badly (TestStatusFindsTheDaemonWhileItsFileIsBad), but not once the edit
// is a syntax error further down the file (an unclosed block): the daemon
// block above it still names the socket, yet status reads nothing of a
// file that does not parse and asks /run/sosappliance/control.sock
// ("no daemon answers ... pass --control-socket"), exit 1. Found by review
// (helper-88).
func TestStatusFindsTheDaemonWhileItsFileDoesNotParse(t *testing.T) {
	n := newTuningNode(t)
	daemon := `daemon { control_socket = "` + n.socket + `" }`
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemon))
	d := n.run(t, "1h")
	t.Cleanup(func() { _ = d.Cmd.Process.Kill() })
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })

	// An operator's half-finished edit: a block opened and not closed.
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemon)+"\nwhitelist \"w\" {\n  server_port = 5201\n")
	testsupport.Eventually(t, converges, "the refused reload", func() bool {
		s := d.Output.String()
		return strings.Contains(s, "reload refused") || strings.Contains(s, "reload failed")
	})
	code, out, errOut := runCLI(t, "status", "-c", n.cfg)
	if code != 0 || !strings.Contains(out, "last reload") || !strings.Contains(out, "sos.hcl:") {
		t.Errorf("status -c FILE after a reload refused for a syntax error: exit %d, want the daemon's status with the file's problem under last reload:\n%s%s", code, out, errOut)
	}
}
