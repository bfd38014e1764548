package appliance

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// asNobody runs sh -c script as uid and gid 65534 with no other groups:
// another user of the machine.
func asNobody(t *testing.T, script string) error {
	t.Helper()
	out, err := testsupport.AsOtherUser(t, "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Logf("as nobody: %s: %v\n%s", script, err, out)
	}
	return err
}

// The attack: another user of the node can write sos.hcl (left 0666, or
// in a directory anyone can write) and edits it. The daemon runs as root
// and writes what the file says to the kernel (kernel.core_pattern as
// well as net.core.rmem_max), so the edit would be theirs to make as
// root. Before, the daemon applied it. Now it refuses the file, at a
// reload and at start, and says why; the node keeps what it had.
func TestConfigOthersCanWriteIsRefused(t *testing.T) {
	root, dir := tempHost(t), testsupport.SharedTempDir(t)
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	cfgPath := filepath.Join(etc, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	// Left writable by every user; another user edits it.
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o666))
	if err := asNobody(t, "printf '%s' '"+daemonConfig("200000")+"' > "+cfgPath); err != nil {
		t.Fatalf("the other user could not write the 0666 file: %v", err)
	}
	td.waitFor("the other user's edit refused", func() bool { return td.status().ReloadFails >= 1 })
	st := td.status()
	if got := td.sysctl("net.core.rmem_max"); got != "100000" {
		t.Errorf("net.core.rmem_max is %s after another user's edit, want 100000 kept", got)
	}
	if r := st.LastReload; r == nil || !strings.Contains(r.Result+strings.Join(r.Problems, " "), "is writable by every user (mode 0666)") {
		t.Errorf("status does not say why the reload was refused: %+v", st.LastReload)
	}

	// Replaced by a file of root's, it is taken.
	fresh := filepath.Join(etc, "fresh.hcl")
	writeFile(t, fresh, daemonConfig("300000"))
	testsupport.RequireNoError(t, os.Chmod(fresh, 0o644))
	testsupport.RequireNoError(t, os.Rename(fresh, cfgPath))
	td.waitFor("root's new file applied", func() bool { return td.sysctl("net.core.rmem_max") == "300000" })

	// A directory anyone can write: the other user replaces the file.
	testsupport.RequireNoError(t, os.Chmod(etc, 0o777))
	other := filepath.Join(etc, "other.hcl")
	if err := asNobody(t, "printf '%s' '"+daemonConfig("400000")+"' > "+other+" && mv -f "+other+" "+cfgPath); err != nil {
		t.Fatalf("the other user could not replace the file in a 0777 directory: %v", err)
	}
	td.waitFor("the replaced file refused", func() bool { return td.status().ReloadFails >= 2 })
	if got := td.sysctl("net.core.rmem_max"); got != "300000" {
		t.Errorf("net.core.rmem_max is %s after another user replaced the file, want 300000 kept", got)
	}
	if r := td.status().LastReload; r == nil || !strings.Contains(r.Result+strings.Join(r.Problems, " "), "the directory "+etc+" is writable by every user") {
		t.Errorf("status does not say why the reload was refused: %+v", r)
	}
	td.stop()

	// A daemon does not start on a file in such a directory, even one of
	// root's: whoever can write the directory can swap it.
	testsupport.RequireNoError(t, os.Chown(cfgPath, 0, 0))
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o644))
	if err := startAgain(t, td); err == nil || !strings.Contains(err.Error(), "the directory "+etc+" is writable by every user") {
		t.Errorf("a daemon started on a file in a 0777 directory: %v", err)
	}
	if got := td.sysctl("net.core.rmem_max"); got != "300000" {
		t.Errorf("net.core.rmem_max is %s after a refused start, want 300000 kept", got)
	}
}

// startAgain runs a fresh daemon on td's config, state and socket, as a
// restart would, and returns what its Run returned: these tests expect a
// refusal at start.
func startAgain(t *testing.T, td *testDaemon) error {
	t.Helper()
	d, err := NewDaemon(Options{
		ConfigPath: td.cfgPath, Node: "host1", StatePath: td.state, ControlSocket: td.socket,
		Root: td.root, Executors: tempHostExecutors(td.root), Settle: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	testsupport.RequireNoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Run(ctx)
}

// otherUsersWriter makes cfgPath 0666 and has user 65534 open it for
// writing and keep the descriptor; when fifo is written to, it writes
// content's file through that descriptor and exits. It ends with the
// test however the test ends.
func otherUsersWriter(t *testing.T, dir, cfgPath, content string) (writer *exec.Cmd, fifo string) {
	t.Helper()
	testsupport.RequireRoot(t, "mkfifo")
	testsupport.RequireNoError(t, os.Chmod(cfgPath, 0o666))
	fifo = filepath.Join(dir, "go")
	testsupport.RequireNoError(t, exec.Command("mkfifo", "-m", "0666", fifo).Run())
	writer = testsupport.AsOtherUser(t, "sh", "-c", "exec 3<>"+cfgPath+"; read x < "+fifo+"; cat "+content+" >&3")
	testsupport.RequireNoError(t, writer.Start())
	t.Cleanup(func() { _ = writer.Process.Kill(); _ = writer.Wait() })
	testsupport.Eventually(t, 5*time.Second, "65534 holds the file open", func() bool {
		_, err := os.Readlink("/proc/" + strconv.Itoa(writer.Process.Pid) + "/fd/3")
		return err == nil
	})
	return writer, fifo
}

// runWatcher runs a watcher of cfgPath that looks every 10 ms, until the
// test ends.
func runWatcher(t *testing.T, cfgPath string) *ConfigWatcher {
	t.Helper()
	cw, err := NewConfigWatcher(cfgPath, 10*time.Millisecond)
	testsupport.RequireNoError(t, err)
	cw.recheck = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return cw
}
