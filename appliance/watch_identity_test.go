package appliance

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The file's identity in the watcher's hash: a save by rename (same
// content, a new inode) is one change reported, and then none while the
// file stays as it is, rechecked every 10 ms; a file kept untrusted
// (0666) likewise reports no change at each recheck. Review (helper-91);
// it passes on 01833b3.
func TestWatcherIdentityIsStable(t *testing.T) {
	testsupport.RequireRoot(t)
	dir := testsupport.SharedTempDir(t)
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	cw := runWatcher(t, cfgPath)

	quiet := func(what string) {
		t.Helper()
		select {
		case <-cw.C:
			t.Errorf("%s: the watcher reported a change of a file that stayed as it was", what)
		case <-time.After(500 * time.Millisecond): // some 50 rechecks
		}
	}
	changed := func(what string) {
		t.Helper()
		select {
		case <-cw.C:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	quiet("at start")
	writeFile(t, cfgPath+".new", daemonConfig("100000"))
	testsupport.RequireNoError(t, os.Rename(cfgPath+".new", cfgPath))
	changed("a save by rename, the same content")
	quiet("after the save")
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o666))
	changed("chmod 0666")
	quiet("kept 0666")
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	changed("chmod 0644")
	quiet("kept 0644, the inode tainted in a daemon")
}
