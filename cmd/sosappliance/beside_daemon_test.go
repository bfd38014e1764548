package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestCommandsBesideTheDaemon: the daemon started where no
// state database exists yet (it creates it, then locks it), with a drift
// check every second (it opens and verifies the database at each). Meanwhile
// plan, apply, status and validate run and exit 0, round after round
// for three drift checks; a SIGHUP
// reload keeps the daemon and its lock; rollback refuses, naming the
// daemon; the daemon stopped, rollback puts 212992 back.
// Written by review (helper-71); it passed.
func TestCommandsBesideTheDaemon(t *testing.T) {
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	d := n.run(t, "1s")
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })
	args := func(cmd ...string) []string {
		return append(cmd, "-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root, "--control-socket", n.socket)
	}
	start := time.Now()
	for i := 0; i < 5 || time.Since(start) < 3*time.Second; i++ {
		for _, c := range [][]string{
			args("plan"),
			args("apply", "--auto-approve"),
			{"status", "-c", n.cfg, "--control-socket", n.socket},
			{"validate", "-c", n.cfg},
		} {
			if code, out, errOut := runCLI(t, c...); code != 0 {
				t.Fatalf("%s beside the daemon: exit %d\n%s%s", c[0], code, out, errOut)
			}
		}
	}
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, converges, "the reload", func() bool { return strings.Contains(d.Output.String(), "reload requested by SIGHUP") })
	time.Sleep(500 * time.Millisecond)
	code, out, errOut := runCLI(t, args("rollback", "--auto-approve")...)
	if code == 0 || !strings.Contains(out+errOut, "daemon") || rmemMaxIn(t, n.root) != "67108864" {
		t.Fatalf("rollback beside the daemon after a reload: exit %d, rmem_max %s\n%s%s", code, rmemMaxIn(t, n.root), out, errOut)
	}
	select {
	case <-d.Done():
		t.Fatalf("the daemon exited: %v\n%s", d.Err(), headLines(d.Output.String(), 20))
	default:
	}
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM")
	}
	code, out, errOut = runCLI(t, args("rollback", "--auto-approve")...)
	if got := rmemMaxIn(t, n.root); code != 0 || got != "212992" {
		t.Fatalf("rollback with the daemon stopped: exit %d, rmem_max %s\n%s%s", code, got, out, errOut)
	}
}
