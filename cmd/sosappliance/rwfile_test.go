package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRunWithOnlyTheStateFileWritable: daemon.state_path outside
// /var/lib/sosappliance, made writable as packaging/files/sosappliance.service
// says ("ReadWritePaths= for a daemon.state_path outside
// /var/lib/sosappliance"): the file itself writable, its directory left
// read-only by ProtectSystem=strict. Stood in for by a private mount
// namespace: the directory bound read-only, the file bound read-write on
// it. A node that only tunes the host writes nothing but that file, and
// `run` converged it before the daemon lock; now it must create
// <state>.daemon beside the file and exits at start.
// Found by review (helper-67) of b39e14a, whose lock file beside the
// database could not be made here; the lock is on the database now.
func TestRunWithOnlyTheStateFileWritable(t *testing.T) {
	testsupport.RequireRoot(t, "unshare", "mount")
	r := statedbApplied(t)
	writeConfig(t, r.cfg, hostTuningFile("300000", ""))
	stateDir := filepath.Join(r.dir, "srv")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.state, filepath.Join(stateDir, "state.db")); err != nil {
		t.Fatal(err)
	}
	r.state = filepath.Join(stateDir, "state.db")
	child := testsupport.Command(t, mainChild, r.args("run", "--control-socket", filepath.Join(r.dir, "control.sock"),
		"--metrics-listen", "", "--drift-interval", "1s", "--settle", "50ms")...)
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && mount --bind "$1" "$1" && mount -o remount,rw,bind "$1" "$1" && shift && exec "$@"`,
		stateDir, r.state, child.Path}, child.Args[1:]...)...)
	cmd.Env = child.Env
	cmd.Stdin = strings.NewReader("")
	buf := &testsupport.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	}()
	deadline := time.After(30 * time.Second)
	for rmemMaxIn(t, r.root) != "300000" {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run with its state file writable (its directory not) exited (%v) instead of converging:\n%s",
				err, headLines(buf.String(), 10))
		case <-deadline:
			t.Fatalf("run did not converge in 30s:\n%s", headLines(buf.String(), 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
