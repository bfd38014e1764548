package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSecondRunOnOneStateRefused (held): with a daemon running on
// the node, a second `run` on the same state database (its own control
// socket, so the socket does not stop it) exits 1 after the daemon
// lock's wait, naming the state file and another run, with the first
// one's pid; the host keeps the first daemon's value.
// Written by review (helper-67); it passed.
func TestSecondRunOnOneStateRefused(t *testing.T) {
	t.Parallel() // its own daemons, files and namespaces; mostly waiting (see the Makefile's -parallel)
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	d := n.run(t, "1s")
	defer d.Kill()
	if !testsupport.Poll(converges, func() bool { return rmemMaxIn(t, n.root) == "67108864" }) {
		t.Fatalf("first daemon did not converge:\n%s", headLines(d.Output.String(), 20))
	}
	out, exit, ran := statedbChild(t, "run", "-c", n.cfg, "--node", "host1", "--state", state,
		"--control-socket", filepath.Join(n.dir, "second.sock"), "--root", n.root, "--metrics-listen", "", "--drift-interval", "1s")
	if ran || exit == nil || !strings.Contains(out, state) || !strings.Contains(out, "another sosappliance run") ||
		!strings.Contains(out, fmt.Sprintf("pid %d ", d.Cmd.Process.Pid)) {
		t.Fatalf("second run on one state database: exit %v, running %v:\n%s", exit, ran, headLines(out, 10))
	}
}
