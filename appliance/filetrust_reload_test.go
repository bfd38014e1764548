package appliance

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Root edits sos.hcl while it is group-writable by a group other than
// root's (0664 root:65534, a "sosadmins" set-up): the reload is refused,
// and its reason names the fix, `chmod g-w FILE`. The operator runs it.
// The content did not change, so the watcher (which reloads on a new
// content hash, and recorded this content's at the refused reload) does
// not reload: the fix the daemon named does not take effect until
// another edit or a SIGHUP.
// Found by review (helper-86); on d23a2ff after chmod g-w, rmem_max stays 100000 (15 s wait).
func TestChmodFixAfterRefusedReloadIsTaken(t *testing.T) {
	root, dir := tempHost(t), testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	testsupport.RequireNoError(t, os.Chown(cfgPath, 0, 65534))
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o664))
	writeFile(t, cfgPath, daemonConfig("200000"))
	td.waitFor("root's edit of a group-writable file refused", func() bool { return td.status().ReloadFails >= 1 })
	if got := td.sysctl("net.core.rmem_max"); got != "100000" {
		t.Fatalf("rmem_max %s after a refused reload, want 100000", got)
	}

	// The fix the refusal names.
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	ok := false
	for i := 0; i < 150 && !ok; i++ {
		ok = td.sysctl("net.core.rmem_max") == "200000"
		if !ok {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !ok {
		t.Errorf("after `chmod g-w %s`, the fix the refused reload named, the daemon still runs the old config (rmem_max %s): a chmod alone reloads nothing (status: %+v)",
			cfgPath, td.sysctl("net.core.rmem_max"), td.status().LastReload)
	}
	td.stop()
}
