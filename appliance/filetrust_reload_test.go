package appliance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Root edits sos.hcl while it is group-writable by a group other than
// root's (0664 root:65534, a "sosadmins" set-up): the reload is refused.
// Before, the refusal named `chmod g-w FILE`, which then reloaded
// nothing: the watcher reloads on a new content hash, and had recorded
// this content's at the refused reload (found by review, helper-86). A
// chmod is not the fix anyway: a member of the group may hold the file
// open for writing, which no chmod undoes (helper-89). So the daemon
// keeps refusing that file after a chmod, and the refusal names a new
// file as the fix; run, it is taken at once, its content unchanged (the
// watcher's hash holds the file's trust as well as its content).
func TestReplacedFileAfterRefusedReloadIsTaken(t *testing.T) {
	root, dir := tempHost(t), testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	testsupport.RequireNoError(t, os.Chown(cfgPath, 0, testsupport.OtherUID))
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o664))
	writeFile(t, cfgPath, daemonConfig("200000"))
	td.waitFor("root's edit of a group-writable file refused", func() bool { return td.status().ReloadFails >= 1 })
	if got := td.sysctl("net.core.rmem_max"); got != "100000" {
		t.Fatalf("rmem_max %s after a refused reload, want 100000", got)
	}

	// A chmod in place is refused still, and the refusal names the fix.
	fails := td.status().ReloadFails
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	td.waitFor("the file fixed in place refused", func() bool { return td.status().ReloadFails > fails })
	r := td.status().LastReload
	fix := r.Result[strings.LastIndex(r.Result, "(")+1 : strings.LastIndex(r.Result, ")")]
	if !strings.HasPrefix(fix, "install -m 0644 -o root -g root "+cfgPath) || td.sysctl("net.core.rmem_max") != "100000" {
		t.Fatalf("after a chmod in place: rmem_max %s, refusal %q", td.sysctl("net.core.rmem_max"), r.Result)
	}
	if out, err := exec.Command("sh", "-c", fix).CombinedOutput(); err != nil {
		t.Fatalf("the fix %q: %v %s", fix, err, out)
	}
	td.waitFor("the replaced file taken", func() bool { return td.sysctl("net.core.rmem_max") == "200000" })
	td.stop()
}
