package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRollbackAfterTheStateFileWasRestoredByRename: the daemon
// runs and has converged rmem_max to 67108864 (recording 212992). The
// operator restores the state database from a backup the way the
// CorruptError message suggests ("restore it from a backup"), by moving
// the copy onto the path (mv, install, an atomic rename: a new inode).
// The daemon's lock (an OFD lock on the file it opened at start) is on
// the old inode; rollback takes its shared lock on the new one, finds no
// daemon, restores 212992 and says so. The backup is of the same
// database (the same lineage), so the daemon's lineage check lets its
// next drift check converge on it again: 67108864 is back, the rollback
// undone, which is what DaemonRunningError is there to prevent.
// Found by review (helper-71) of c078c03: the lock was on the old file,
// and the copy had its lineage. The daemon now refuses another file.
func TestRollbackAfterTheStateFileWasRestoredByRename(t *testing.T) {
	t.Parallel() // its own daemons, files and namespaces; mostly waiting (see the Makefile's -parallel)
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	d := n.run(t, "1s")
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(n.dir, "state.db.backup")
	if err := os.WriteFile(backup, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, state); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "rollback", "--auto-approve", "-c", n.cfg, "--node", "host1", "--state", state,
		"--root", n.root, "--control-socket", n.socket)
	t.Logf("rollback with the daemon running, its state file restored by a rename: exit %d\n%s%s", code, out, errOut)
	if code != 0 {
		if !strings.Contains(out+errOut, "daemon") {
			t.Fatalf("rollback refused without saying a daemon runs: exit %d\n%s%s", code, out, errOut)
		}
		return
	}
	if testsupport.Poll(5*time.Second, func() bool { return rmemMaxIn(t, n.root) == "67108864" }) {
		t.Fatalf("rollback exited 0 with the daemon running (its lock on the file's old inode), and the daemon's next drift check set rmem_max back to 67108864; daemon log:\n%s",
			headLines(d.Output.String(), 12))
	}
}
