package filetrust

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Root runs `sosappliance validate ../sos.hcl` (or apply -c, run -c) from
// a working directory that user 65534 removed: root had cd'd into
// 65534's empty directory pub/incoming. os.Getwd fails (getcwd says
// ENOENT), and the walk then takes the relative path from "/": it checks
// /sos.hcl, finds nothing there, and passes. The kernel goes up from the
// removed directory, so the file read is pub/sos.hcl, 65534's.
// Found by review (helper-89); on 45557b1 Check accepts.
func TestRelativePathFromRemovedWorkingDirectory(t *testing.T) {
	dir := walkTree(t)
	pub := filepath.Join(dir, "pub")
	mkdirOwned(t, pub, 0o755, nobody, nobody)
	incoming := filepath.Join(pub, "incoming")
	mkdirOwned(t, incoming, 0o755, nobody, nobody)
	t.Chdir(incoming)
	walkAsNobody(t, "echo 'nobody was here' > "+pub+"/sos.hcl && rmdir "+incoming)

	err := Check("config file", "../sos.hcl")
	got, _ := os.ReadFile("../sos.hcl")
	if err == nil {
		t.Errorf("Check(../sos.hcl) from a removed working directory accepted it; it reads %q, user 65534's file %s/sos.hcl", got, pub)
	}
}

// A path through a magic link of /proc: the kernel follows
// /proc/self/fd/N to the open file itself, the walk follows the text
// readlink gives. For a file removed since it was opened that text is
// "/.../name (deleted)", a name missing, so the walk passes, and the
// file read is whatever was opened. Here root's shell gave stdin from
// /tmp-like shared/sos.hcl, user 65534's (`validate /dev/stdin < FILE`),
// and 65534 removed the name: the walk checks nothing of the file.
// Found by review (helper-89); on 45557b1 Check accepts.
func TestMagicLinkToRemovedFile(t *testing.T) {
	dir := walkTree(t)
	shared := filepath.Join(dir, "shared")
	mkdirOwned(t, shared, 0o777|os.ModeSticky, 0, 0)
	evil := filepath.Join(shared, "sos.hcl")
	walkAsNobody(t, "echo 'nobody was here' > "+evil)
	if err := Check("config file", evil); err == nil {
		t.Fatalf("Check(%s) accepted user 65534's file", evil)
	}
	f, err := os.Open(evil)
	testsupport.RequireNoError(t, err)
	defer f.Close()
	walkAsNobody(t, "rm "+evil)

	for _, path := range []string{
		"/proc/self/fd/" + strconv.Itoa(int(f.Fd())),
		"/dev/fd/" + strconv.Itoa(int(f.Fd())),
	} {
		err := Check("config file", path)
		got, _ := os.ReadFile(path)
		if err == nil {
			t.Errorf("Check(%s) accepted it; it reads %q, user 65534's file", path, got)
		}
	}
}

// A config, plan or key path whose name, or a directory of it, is
// missing in a sticky directory others can write passes Check ("its
// reader says it is missing"); but its reader opens it by path after the
// check, and user 65534 can make the name in between. Check's acceptance
// says nothing about what is read. CheckUnshared refuses this; Check,
// which apply, run and the TLS loaders use, does not. (The window is
// the time from the walk to the open; here the steps are in order.)
// Found by review (helper-89); on 45557b1 Check accepts, then the path reads 65534's content.
func TestMissingNameInStickyDirectoryThenMadeByAnotherUser(t *testing.T) {
	for _, tc := range []struct{ name, rel, make string }{
		{"the file", "sos.hcl", "echo 'nobody was here' > %s/sos.hcl"},
		{"a directory of it", "cfg/sos.hcl", "mkdir %s/cfg && echo 'nobody was here' > %s/cfg/sos.hcl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := walkTree(t)
			shared := filepath.Join(dir, "shared")
			mkdirOwned(t, shared, 0o777|os.ModeSticky, 0, 0)
			path := filepath.Join(shared, tc.rel)
			err := Check("config file", path)
			walkAsNobody(t, strings.ReplaceAll(tc.make, "%s", shared))
			got, _ := os.ReadFile(path)
			if err == nil && strings.Contains(string(got), "nobody") {
				t.Errorf("Check(%s) accepted a missing name in a sticky shared directory; user 65534 then made it, and it reads %q", path, got)
			}
		})
	}
}

// A file another user could write is refused with its fix, a chmod or
// chown of the file ("chmod o-w FILE"). A user who could write it may
// have opened it for writing while it was so; neither command closes
// that: write permission is checked at open. After the fix Check
// accepts the file, and 65534 writes to it through the descriptor it
// kept. The fix to name is a new file (install -m 0644 -o root FILE
// FILE.new && mv FILE.new FILE), not a chmod of the old one.
// Found by review (helper-89); on 45557b1 the file accepted after the named fix reads 65534's content.
func TestNamedFixLeavesAnOpenWriterIn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      os.FileMode
		uid, gid  int
		wantInFix string
	}{
		{"writable by every user", 0o666, 0, 0, "install -m 0644 -o root"},
		{"writable by group 65534", 0o664, 0, nobody, "install -m 0644 -o root"},
		{"owned by 65534", 0o644, nobody, nobody, "install -m 0644 -o root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := walkTree(t)
			real := rootConfig(t, dir)
			testsupport.RequireNoError(t, os.Chown(real, tc.uid, tc.gid))
			testsupport.RequireNoError(t, os.Chmod(real, tc.mode))
			err := Check("config file", real)
			if err == nil {
				t.Fatalf("Check(%s) accepted a file 65534 can write", real)
			}
			// 65534 opens it for writing and keeps the descriptor.
			fifo := filepath.Join(dir, "go")
			testsupport.RequireNoError(t, exec.Command("mkfifo", "-m", "0666", fifo).Run())
			writer := testsupport.AsOtherUser(t, "sh", "-c", "exec 3<>"+real+"; read x < "+fifo+"; echo 'nobody was here' >&3")
			said := &testsupport.LockedBuffer{}
			writer.Stdout, writer.Stderr = said, said
			testsupport.RequireNoError(t, writer.Start())
			t.Cleanup(func() { _ = writer.Process.Kill(); _ = writer.Wait() })
			// Wait until the descriptor is open: 65534's sh opened fd 3.
			for i := 0; i < 500; i++ {
				if _, err := os.Readlink("/proc/" + strconv.Itoa(writer.Process.Pid) + "/fd/3"); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}

			msg := err.Error()
			open, close := strings.LastIndex(msg, "("), strings.LastIndex(msg, ")")
			if open < 0 || close < open || !strings.Contains(msg[open:close], tc.wantInFix) {
				t.Fatalf("no fix in %q", msg)
			}
			fix := msg[open+1 : close]
			if out, err := exec.Command("sh", "-c", fix).CombinedOutput(); err != nil {
				t.Fatalf("the fix %q: %v %s", fix, err, out)
			}
			accepted := Check("config file", real) == nil

			// Not blocking: a writer that ended without reading the
			// FIFO held the whole package until its timeout.
			var w *os.File
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("user 65534's writer never opened the FIFO for reading (%v); it said: %q", err, said.String())
				}
			}
			w.WriteString("go\n")
			w.Close()
			_ = writer.Wait()
			got, _ := os.ReadFile(real)
			if accepted && strings.Contains(string(got), "nobody") {
				t.Errorf("after the fix the refusal named (%s), Check accepts %s, and user 65534 wrote it through the descriptor it kept: %q", fix, real, got)
			}
		})
	}
}
