package appliance

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The config is 0666 for a while (an archive unpacked so, a umask
// slip); user 65534 opens it for writing then and keeps the descriptor.
// The reload is refused, naming `chmod o-w FILE`; the operator runs it,
// and the watcher (which now hashes the trust check's result in) reloads
// it, accepted. Then 65534 writes its own config through the kept
// descriptor: the content changes, the check passes (the file is root's,
// 0644), and the daemon applies 65534's values as root.
// Found by review (helper-89); on 45557b1 rmem_max becomes 65534's 200000.
func TestFixedConfigWrittenThroughAnOpenDescriptor(t *testing.T) {
	root, dir := tempHost(t), testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	evil := filepath.Join(dir, "evil.hcl")
	writeFile(t, evil, daemonConfig("200000"))
	testsupport.RequireNoError(t, os.Chmod(evil, 0o644))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	writer, fifo := otherUsersWriter(t, dir, cfgPath, evil)
	td.waitFor("the 0666 file refused", func() bool { return td.status().ReloadFails >= 1 })

	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644)) // chmod o-w, as the refusal says
	reloads := td.status().Reloads
	td.waitFor("the fixed file reloaded", func() bool { return td.status().Reloads > reloads })

	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	testsupport.RequireNoError(t, err)
	_, _ = w.WriteString("go\n")
	w.Close()
	testsupport.RequireNoError(t, writer.Wait())
	ok := false
	for i := 0; i < 40 && !ok; i++ { // 2 s: the settle is 50 ms
		ok = td.sysctl("net.core.rmem_max") == "200000"
		time.Sleep(50 * time.Millisecond)
	}
	if ok {
		t.Errorf("after the fix the refusal named (chmod o-w), user 65534 wrote the config through a descriptor it kept, and the daemon applied its rmem_max 200000 as root")
	}
	td.stop()
}

// A config that stays refused (group 65534 can write it) is not
// reloaded at each recheck: its hash, the trust check's result in it, is
// the same each time. A chmod of its directory, not of the file, that
// fixes the check is a change the watcher reports. Written by review
// (helper-89); it passed on 45557b1.
func TestWatcherOnAnUntrustedFile(t *testing.T) {
	testsupport.RequireRoot(t)
	dir := testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o775))
	testsupport.RequireNoError(t, os.Chown(etc, 0, 65534))
	testsupport.RequireNoError(t, os.Chmod(etc, 0o775))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	cw := runWatcher(t, cfgPath)

	select {
	case <-cw.C:
		t.Errorf("the watcher reported a change of a file that stayed as it was")
	case <-time.After(500 * time.Millisecond): // some 50 rechecks
	}
	testsupport.RequireNoError(t, os.Chmod(etc, 0o755))
	select {
	case <-cw.C:
	case <-time.After(10 * time.Second):
		t.Errorf("chmod g-w of the directory, which makes the file trusted, reported no change")
	}
}
