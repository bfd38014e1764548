package appliance

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

// The taint lives in the daemon's memory only. The config is 0666, user
// 65534 opens it for writing and keeps the descriptor; the daemon refuses
// it and taints its inode; the operator runs chmod o-w (the fix of the
// earlier release, or of habit) and restarts the daemon (a reboot, an
// upgrade, systemctl restart). The new daemon never saw the file 0666:
// 65534 writes its config through the kept descriptor and it is applied
// as root. Found by review (helper-91); on 01833b3 rmem_max became
// 200000. Now the restarted daemon refuses the file while another user's
// process holds it open for writing.
func TestTaintForgottenOnRestart(t *testing.T) {
	root, dir := tempHost(t), testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	evil := filepath.Join(dir, "evil.hcl")
	writeFile(t, evil, daemonConfig("200000"))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	writer, _ := otherUsersWriter(t, dir, cfgPath, evil)
	td.waitFor("the 0666 file refused", func() bool { return td.status().ReloadFails >= 1 })
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	td.stop()

	// The restarted daemon refuses the file while 65534 holds it open
	// for writing (write permission is checked at open), naming the
	// process.
	err := startAgain(t, td)
	if want := "is held open for writing by pid " + strconv.Itoa(writer.Process.Pid) + " (uid 65534)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the restarted daemon, with 65534 holding the file open for writing: %v, want a refusal that says %q", err, want)
	}
	if got := td.sysctl("net.core.rmem_max"); got != "100000" {
		t.Errorf("rmem_max %s, want 100000 kept", got)
	}
}

func inodeNumber(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	testsupport.RequireNoError(t, syscall.Stat(path, &st))
	return st.Ino
}

// The taint is a (device, inode) pair kept for the daemon's life, and
// ext4 (/etc on most hosts; here a loop-mounted one) gives a freed inode number to the next file
// made. The operator replaces the once-0666 config as the refusal says
// (install ... && mv ...): the old inode is freed. A later edit saved by
// rename (vim, install, an ansible template) makes a new file of root's,
// 0644, that gets the old number: the daemon refuses it as "the file
// this daemon found another user could write", and keeps running the
// old config. Review (helper-91); fails on 01833b3.
func TestTaintMatchesALaterFileOnInodeReuse(t *testing.T) {
	testsupport.RequireRoot(t, "install", "mkfs.ext4", "mount", "umount")
	root, dir := tempHost(t), testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	img := filepath.Join(dir, "etc.img")
	testsupport.RequireNoError(t, os.WriteFile(img, nil, 0o600))
	testsupport.RequireNoError(t, os.Truncate(img, 32<<20))
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, etc).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-d", etc).Run() })
	spare := filepath.Join(etc, "spare")
	testsupport.RequireNoError(t, os.Mkdir(spare, 0o755))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o666))
	old := inodeNumber(t, cfgPath)
	td.waitFor("the 0666 file refused", func() bool { return td.status().ReloadFails >= 1 })
	fix := "install -m 0644 -o root -g root " + cfgPath + " " + cfgPath + ".new && mv " + cfgPath + ".new " + cfgPath
	out, err := exec.Command("sh", "-c", fix).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	reloads := td.status().Reloads
	td.waitFor("the replaced file reloaded", func() bool { return td.status().Reloads > reloads })

	// The next edit, saved by rename; the spare files stand for the
	// other files made on the host meanwhile.
	edit := cfgPath + ".new"
	found := false
	for i := 0; i < 2000 && !found; i++ {
		writeFile(t, edit, daemonConfig("150000"))
		if inodeNumber(t, edit) == old {
			found = true
			break
		}
		testsupport.RequireNoError(t, os.Rename(edit, filepath.Join(spare, strconv.Itoa(i))))
	}
	if !found {
		t.Fatalf("no new file got the freed inode %d (not ext4?)", old)
	}
	fails := td.status().ReloadFails
	testsupport.RequireNoError(t, os.Rename(edit, cfgPath))
	td.waitFor("the edit reloaded or refused", func() bool {
		st := td.status()
		return st.ReloadFails > fails || td.sysctl("net.core.rmem_max") == "150000"
	})
	if st := td.status(); st.ReloadFails > fails && st.LastReload != nil && strings.Contains(st.LastReload.Result, "another user could write") {
		t.Errorf("a new config file of root's, 0644, made after the tainted one was replaced, got its freed inode number and was refused: %s", st.LastReload.Result)
	}
	td.stop()
}
