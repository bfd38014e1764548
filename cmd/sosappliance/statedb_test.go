package main

// The real CLI and daemon on a damaged, missing or shared state database.
//
// Written by review (helper-65). Each test's comment tells the defect as
// found, before the fix (store.Open's checks, the daemon's openState and
// its lock beside the database, rollback's MustExist open); the damaged
// record, the newer schema, the held lock and the read-only directory
// held, and were kept.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// statedbNode is a temp host tree whose rmem_max was 212992 before an
// apply set it to 67108864, recorded in state.
type statedbNode struct {
	dir, root, cfg, state string
}

func statedbApplied(t *testing.T) statedbNode {
	t.Helper()
	n := newTuningNode(t)
	r := statedbNode{dir: n.dir, root: n.root, cfg: n.cfg, state: filepath.Join(n.dir, "state.db")}
	writeConfig(t, r.cfg, hostTuningFile("67108864", ""))
	if code, out, errOut := runCLI(t, r.args("apply", "--auto-approve")...); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if got := rmemMaxIn(t, r.root); got != "67108864" {
		t.Fatalf("apply left rmem_max %s", got)
	}
	return r
}

func (r statedbNode) args(cmd ...string) []string {
	return append(cmd, "-c", r.cfg, "--node", "host1", "--state", r.state, "--root", r.root)
}

// statedbChild runs the CLI in a child process (a crash there is not
// this test binary's), killed after 30s: `run` that does not fail keeps
// running. It returns the output and whether the child was still running.
func statedbChild(t *testing.T, args ...string) (out string, exit error, ran bool) {
	t.Helper()
	cmd := testsupport.Command(t, mainChild, args...)
	buf := &testsupport.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	cmd.Stdin = strings.NewReader("")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.String(), err, false
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return buf.String(), nil, true
	}
}

// TestCommandsOnATruncatedStateFile: after an apply, the state
// file is cut to its first two pages (its meta pages intact). plan,
// apply, rollback and the daemon's start each die of SIGBUS inside
// bbolt ("fatal error: fault", exit 2, a Go stack) instead of exiting 1
// with an error that names the state file.
func TestCommandsOnATruncatedStateFile(t *testing.T) {
	r := statedbApplied(t)
	if err := os.Truncate(r.state, 2*int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"plan"},
		{"apply", "--auto-approve"},
		{"rollback", "--auto-approve"},
		{"run", "--control-socket", filepath.Join(r.dir, "control.sock"), "--metrics-listen", "", "--drift-interval", "1h"},
	} {
		t.Run(c[0], func(t *testing.T) {
			out, exit, ran := statedbChild(t, r.args(c...)...)
			if ran {
				t.Fatalf("%s kept running on a truncated state file:\n%s", c[0], headLines(out, 20))
			}
			if strings.Contains(out, "fatal error") || strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
				t.Fatalf("%s crashed (%v):\n%s", c[0], exit, headLines(out, 8))
			}
			if exit == nil || !strings.Contains(out, r.state) {
				t.Fatalf("%s: exit %v, want exit 1 with an error naming %s:\n%s", c[0], exit, r.state, headLines(out, 20))
			}
		})
	}
}

// TestRollbackAfterTheStateFileWasEmptied: after an apply the
// state file is found with zero bytes. bbolt makes it a new database, so
// rollback reports nothing to roll back and exits 0 with rmem_max still
// the appliance's 67108864; the next apply then records 67108864 as the
// host's original, and no rollback can ever put 212992 back. It should
// refuse, naming the file.
func TestRollbackAfterTheStateFileWasEmptied(t *testing.T) {
	r := statedbApplied(t)
	if err := os.Truncate(r.state, 0); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, r.args("rollback", "--auto-approve")...)
	if code == 0 {
		t.Fatalf("rollback on an emptied state file exited 0 with rmem_max left at %s (was 212992 before the appliance):\n%s%s",
			rmemMaxIn(t, r.root), out, errOut)
	}
	if !strings.Contains(errOut, r.state) {
		t.Fatalf("rollback: exit %d without naming %s:\n%s%s", code, r.state, out, errOut)
	}
}

// TestRollbackWithTheItemsBucketGone: after an apply the state
// file is a valid bbolt file at serial 1 whose items bucket is gone.
// Open recreates the bucket empty, rollback finds nothing and exits 0,
// leaving 67108864 on the host.
func TestRollbackWithTheItemsBucketGone(t *testing.T) {
	r := statedbApplied(t)
	db, err := bolt.Open(r.state, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("items")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, r.args("rollback", "--auto-approve")...)
	if code == 0 {
		t.Fatalf("rollback on a state file with no items bucket exited 0 with rmem_max left at %s:\n%s%s",
			rmemMaxIn(t, r.root), out, errOut)
	}
}

// TestCommandsOnADamagedRecord (held): a record that does not
// decode fails plan, apply, rollback and the daemon's start with exit 1
// naming the item, and nothing on the host changes.
func TestCommandsOnADamagedRecord(t *testing.T) {
	r := statedbApplied(t)
	db, err := bolt.Open(r.state, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("items")).Put([]byte("sysctl/net.core.rmem_max"), []byte(`{"kind":`))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	writeConfig(t, r.cfg, hostTuningFile("300000", ""))
	for _, c := range [][]string{{"plan"}, {"apply", "--auto-approve"}, {"rollback", "--auto-approve"}} {
		code, out, errOut := runCLI(t, r.args(c...)...)
		if code != 1 || !strings.Contains(errOut, "sysctl/net.core.rmem_max") {
			t.Errorf("%s: exit %d\n%s%s", c[0], code, out, errOut)
		}
	}
	out, exit, ran := statedbChild(t, r.args("run", "--control-socket", filepath.Join(r.dir, "control.sock"),
		"--metrics-listen", "", "--drift-interval", "1h")...)
	if ran || exit == nil || !strings.Contains(out, "sysctl/net.core.rmem_max") {
		t.Errorf("run: exit %v, running %v:\n%s", exit, ran, headLines(out, 10))
	}
	if got := rmemMaxIn(t, r.root); got != "67108864" {
		t.Errorf("host changed to %s", got)
	}
}

// TestCommandsOnANewerSchema (held): a state file of a newer
// schema is refused by plan, apply, rollback and run with exit 1 naming
// the file and the version, and is left as it was.
func TestCommandsOnANewerSchema(t *testing.T) {
	r := statedbApplied(t)
	db, err := bolt.Open(r.state, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(r.state)
	for _, c := range [][]string{
		{"plan"},
		{"apply", "--auto-approve"},
		{"rollback", "--auto-approve"},
		{"run", "--control-socket", filepath.Join(r.dir, "control.sock"), "--metrics-listen", "", "--drift-interval", "1h"},
	} {
		out, exit, ran := statedbChild(t, r.args(c...)...)
		if ran || exit == nil || !strings.Contains(out, r.state) || !strings.Contains(out, "schema version 9") {
			t.Errorf("%s: exit %v, running %v:\n%s", c[0], exit, ran, headLines(out, 10))
		}
	}
	after, _ := os.ReadFile(r.state)
	if string(before) != string(after) {
		t.Error("a refused newer schema file was written")
	}
	if got := rmemMaxIn(t, r.root); got != "67108864" {
		t.Errorf("host changed to %s", got)
	}
}

// TestApplyWhileAnotherHoldsTheState (held): apply while another
// process holds the state database exits 1 within the lock timeout,
// naming the holder's pid and the file, and changes nothing.
func TestApplyWhileAnotherHoldsTheState(t *testing.T) {
	r := statedbApplied(t)
	writeConfig(t, r.cfg, hostTuningFile("300000", ""))
	// Another process's bbolt lock, as a second sosappliance takes it
	// (flock is per open file, so this process's own open conflicts too).
	db, err := bolt.Open(r.state, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	code, out, errOut := runCLI(t, r.args("apply", "--auto-approve")...)
	if code != 1 || !strings.Contains(errOut, "in use by pid") || !strings.Contains(errOut, r.state) {
		t.Errorf("apply while held: exit %d\n%s%s", code, out, errOut)
	}
	if got := rmemMaxIn(t, r.root); got != "67108864" {
		t.Errorf("host changed to %s", got)
	}
}

// TestCommandsOnAReadOnlyStateDirectory (held): with the state
// directory mounted read-only (a private mount namespace of the child),
// plan, apply, rollback and run exit 1 at once with an error naming the
// file and "read-only file system", and the host is untouched.
func TestCommandsOnAReadOnlyStateDirectory(t *testing.T) {
	testsupport.RequireRoot(t, "unshare", "mount")
	r := statedbApplied(t)
	writeConfig(t, r.cfg, hostTuningFile("300000", ""))
	stateDir := filepath.Dir(r.state)
	roDir := filepath.Join(stateDir, "ro")
	if err := os.Mkdir(roDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.state, filepath.Join(roDir, "state.db")); err != nil {
		t.Fatal(err)
	}
	r.state = filepath.Join(roDir, "state.db")
	for _, c := range [][]string{
		{"plan"},
		{"apply", "--auto-approve"},
		{"rollback", "--auto-approve"},
		{"run", "--control-socket", filepath.Join(r.dir, "control.sock"), "--metrics-listen", "", "--drift-interval", "1h"},
	} {
		child := testsupport.Command(t, mainChild, r.args(c...)...)
		cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"`, roDir, child.Path}, child.Args[1:]...)...)
		cmd.Env = child.Env
		cmd.Stdin = strings.NewReader("")
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s on a read-only state directory kept running:\n%s", c[0], headLines(string(out), 10))
			continue
		}
		if err == nil || !strings.Contains(string(out), r.state) || !strings.Contains(string(out), "read-only file system") {
			t.Errorf("%s: %v\n%s", c[0], err, headLines(string(out), 10))
		}
	}
	if got := rmemMaxIn(t, r.root); got != "67108864" {
		t.Errorf("host changed to %s", got)
	}
}

// TestRunWhileAnotherHoldsTheState (held): the daemon's start
// while another process holds the state database exits 1 after its lock
// timeout, naming the holder's pid and the file; the host is untouched.
func TestRunWhileAnotherHoldsTheState(t *testing.T) {
	t.Parallel() // its own daemons, files and namespaces; mostly waiting (see the Makefile's -parallel)
	r := statedbApplied(t)
	writeConfig(t, r.cfg, hostTuningFile("300000", ""))
	db, err := bolt.Open(r.state, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out, exit, ran := statedbChild(t, r.args("run", "--control-socket", filepath.Join(r.dir, "control.sock"),
		"--metrics-listen", "", "--drift-interval", "1h")...)
	if ran || exit == nil || !strings.Contains(out, "in use by pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(out, r.state) {
		t.Errorf("run while held: exit %v, running %v:\n%s", exit, ran, headLines(out, 10))
	}
	if got := rmemMaxIn(t, r.root); got != "67108864" {
		t.Errorf("host changed to %s", got)
	}
}

// TestDaemonOnAStateFileRemovedUnderIt: `run` converges
// rmem_max from the node's 212992 to 67108864 and records 212992; then
// the state file leaves its path (a clean-up of /var/lib/sosappliance)
// and something sets rmem_max to 100000.
//
// Before: the daemon opened the file afresh for every drift check, so
// the next check silently made a new database and corrected the drift,
// recording 100000 as the node's original; a rollback then put back
// 100000, never 212992. Now the daemon refuses to converge against a
// database that is not the one it started with, says so, and goes on
// once the file is back. Found by review (helper-65).
func TestDaemonOnAStateFileRemovedUnderIt(t *testing.T) {
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	away := state + ".away"
	d := n.run(t, "1s")
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	if err := os.Rename(state, away); err != nil {
		t.Fatal(err)
	}
	// Drift: something else sets the value.
	if err := os.WriteFile(filepath.Join(n.root, "proc/sys/net/core/rmem_max"), []byte("100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, converges, "the daemon saying its state database went away", func() bool {
		return strings.Contains(d.Output.String(), "went away while this daemon ran")
	})
	if got := rmemMaxIn(t, n.root); got != "100000" {
		t.Fatalf("the daemon converged without its state database: rmem_max %s; log:\n%s", got, headLines(d.Output.String(), 30))
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatalf("the daemon made a new state database at %s", state)
	}
	// The file is put back: the daemon goes on with it.
	if err := os.Rename(away, state); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, converges, "the drift corrected once the database is back", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	d.Kill()
	code, out, errOut := runCLI(t, "rollback", "--auto-approve", "-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root)
	if got := rmemMaxIn(t, n.root); code != 0 || got != "212992" {
		t.Fatalf("rollback (exit %d) left rmem_max at %s, not the node's 212992:\n%s%s\nthe daemon's log:\n%s",
			code, got, out, errOut, headLines(d.Output.String(), 30))
	}
}

// TestRollbackWhileTheDaemonRuns: `rollback` on a node whose
// daemon runs. rollback does not look for the daemon (only the switch
// part of apply does, by its control socket): it puts 212992 back,
// forgets the record and says "Rollback complete", and the daemon's next
// drift check sets 67108864 again, as a corrected drift. The operator is
// told the node is rolled back while it is not. rollback should refuse
// while a daemon answers on the control socket ("stop sosappliance
// first"), as the README's order (systemctl stop, then rollback) assumes.
func TestRollbackWhileTheDaemonRuns(t *testing.T) {
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	d := n.run(t, "1s")
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	code, out, errOut := runCLI(t, "rollback", "--auto-approve", "-c", n.cfg, "--node", "host1", "--state", state,
		"--root", n.root, "--control-socket", n.socket)
	t.Logf("rollback while the daemon runs: exit %d\n%s%s", code, out, errOut)
	if code != 0 {
		if !strings.Contains(out+errOut, "daemon") && !strings.Contains(out+errOut, "running") {
			t.Fatalf("rollback refused without saying a daemon runs: exit %d\n%s%s", code, out, errOut)
		}
		// The refusal names the daemon's process.
		if pid := fmt.Sprintf("pid %d ", d.Cmd.Process.Pid); !strings.Contains(out+errOut, pid) {
			t.Errorf("rollback's refusal does not name the daemon's %s:\n%s%s", pid, out, errOut)
		}
		return
	}
	// Three drift intervals of the daemon.
	undone := testsupport.Poll(5*time.Second, func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	if undone {
		t.Fatalf("rollback exited 0 (%q) but the running daemon set rmem_max back to 67108864:\n%s",
			strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), headLines(d.Output.String(), 10))
	}
}

// TestRollbackWithABrokenConfigNamingItsState: the config's
// daemon block puts the state elsewhere than the default; apply records
// 212992 there. A bad edit then breaks the file, and rollback is run,
// as one does after a bad edit. rollback, unable to read the file, falls
// back to the default state path (/var/lib/sosappliance/state.db, here
// on a tmpfs of the child's own mount namespace), creates an empty
// database there, prints "Nothing is recorded to roll back" and exits
// 0, with 67108864 left on the host. It should say it could not read
// the file to find its state_path and ask for --state, or at least not
// take a database it just created for the node's records.
func TestRollbackWithABrokenConfigNamingItsState(t *testing.T) {
	testsupport.RequireRoot(t, "unshare", "mount")
	n := newTuningNode(t)
	state := filepath.Join(n.dir, "custom", "state.db")
	good := hostTuningFile("67108864", "daemon {\n  state_path = \""+state+"\"\n}\n")
	writeConfig(t, n.cfg, good)
	if code, out, errOut := runCLI(t, "apply", "--auto-approve", "-c", n.cfg, "--node", "host1", "--root", n.root); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(state); err != nil || rmemMaxIn(t, n.root) != "67108864" {
		t.Fatalf("apply did not record in %s: %v, rmem_max %s", state, err, rmemMaxIn(t, n.root))
	}
	writeConfig(t, n.cfg, good+"\ntuning \"u\" {\n")
	child := testsupport.Command(t, mainChild, "rollback", "--auto-approve", "-c", n.cfg, "--node", "host1", "--root", n.root)
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /var/lib && exec "$@"`, "sh", child.Path}, child.Args[1:]...)...)
	cmd.Env = child.Env
	cmd.Stdin = strings.NewReader("")
	outB, err := cmd.CombinedOutput()
	t.Logf("rollback with a broken file: %v\n%s", err, outB)
	if err == nil && rmemMaxIn(t, n.root) != "212992" {
		t.Fatalf("rollback exited 0 with rmem_max left at %s (212992 is recorded in %s, which the broken file names)",
			rmemMaxIn(t, n.root), state)
	}
}
