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

// TestDaemonOnOverlayStateConvergesAgain: the state database is
// in an overlayfs lower layer (an image's /var/lib), its upper layer on
// another filesystem (tmpfs), and the daemon runs on the merged path.
// Its first write copies the file up; openState's os.SameFile check must
// not take the copy-up for "a copy put in its place": the daemon must
// converge again after a drift, twice. (It held: the first stat is taken
// after the read-write open that copies up, and overlayfs keeps st_ino
// across copy-up.)
// Written by review (helper-75); it passed.
func TestDaemonOnOverlayStateConvergesAgain(t *testing.T) {
	testsupport.RequireRoot(t, "unshare", "mount")
	r := statedbApplied(t)
	writeConfig(t, r.cfg, hostTuningFile("300000", ""))
	lower, up, merged := filepath.Join(r.dir, "lower"), filepath.Join(r.dir, "up"), filepath.Join(r.dir, "merged")
	for _, d := range []string{lower, up, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(r.state, filepath.Join(lower, "state.db")); err != nil {
		t.Fatal(err)
	}
	r.state = filepath.Join(merged, "state.db")
	child := testsupport.Command(t, mainChild, r.args("run", "--control-socket", filepath.Join(r.dir, "control.sock"),
		"--metrics-listen", "", "--drift-interval", "1s", "--settle", "50ms")...)
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs "$1" && mkdir "$1/u" "$1/w" && mount -t overlay overlay -o "lowerdir=$0,upperdir=$1/u,workdir=$1/w" "$2" && shift 2 && exec "$@"`,
		lower, up, merged, child.Path}, child.Args[1:]...)...)
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
	wait := func(what string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for rmemMaxIn(t, r.root) != "300000" {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("%s: the daemon on an overlayfs state file exited (%v):\n%s", what, err, headLines(buf.String(), 20))
			case <-deadline:
				t.Fatalf("%s: the daemon on an overlayfs state file did not converge in 30s:\n%s", what, headLines(buf.String(), 20))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	wait("first convergence")
	for i := 0; i < 2; i++ {
		if err := os.WriteFile(filepath.Join(r.root, "proc/sys/net/core/rmem_max"), []byte("212992\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		wait("after a drift")
	}
	if strings.Contains(buf.String(), "another file") {
		t.Fatalf("the daemon took its own copied-up file for another:\n%s", headLines(buf.String(), 20))
	}
}
