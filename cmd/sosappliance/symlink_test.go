package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRollbackByTheRealPathWhileTheDaemonRuns: the state
// database's path is a symlink (state_path /var/lib/sosappliance/state.db
// pointing to a data disk, here dir/state.db -> dir/data/state.db), the
// daemon runs on the link's path, and rollback is given the file's real
// path. The daemon lock is named after the path string
// (<path>.daemon), so rollback looks for dir/data/state.db.daemon, finds
// none ("no daemon ever ran there"), rolls back while the daemon runs,
// and the daemon's next drift check applies its file again: the defect
// the lock was added for. The lock should name the file, not the path
// (an OFD lock on the database file itself, or the path resolved with
// filepath.EvalSymlinks).
// Found by review (helper-67) of b39e14a: the lock file was named after
// the path given, so another path to the file found none.
func TestRollbackByTheRealPathWhileTheDaemonRuns(t *testing.T) {
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	real := filepath.Join(n.dir, "data", "state.db")
	if err := os.MkdirAll(filepath.Dir(real), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(n.dir, "state.db")); err != nil {
		t.Fatal(err)
	}
	d := n.run(t, "1s")
	defer d.Kill()
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	if _, err := os.Stat(real); err != nil {
		t.Fatalf("the daemon did not make its database through the link: %v", err)
	}
	code, out, errOut := runCLI(t, "rollback", "--auto-approve", "-c", n.cfg, "--node", "host1", "--state", real,
		"--root", n.root, "--control-socket", n.socket)
	t.Logf("rollback while the daemon runs: exit %d\n%s%s", code, out, errOut)
	if code != 0 {
		if !strings.Contains(out+errOut, "running") {
			t.Fatalf("rollback refused without saying a daemon runs: exit %d\n%s%s", code, out, errOut)
		}
		return
	}
	if testsupport.Poll(5*time.Second, func() bool { return rmemMaxIn(t, n.root) == "67108864" }) {
		t.Fatalf("rollback by the database's real path ran under the running daemon (exit 0), which set rmem_max back to 67108864:\n%s",
			headLines(d.Output.String(), 12))
	}
}
