package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// OtherUID is the uid, and the gid, of "another user of the machine" in
// the tests that mount a local user's attack (nobody on Debian).
const OtherUID = 65534

// AsOtherUser is a command that runs name with args as uid and gid
// OtherUID with no other groups (setpriv), for a test that mounts a local
// user's attack. It requires root and setpriv.
func AsOtherUser(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	RequireRoot(t, "setpriv")
	return exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", name}, args...)...)
}

// SharedTempDir is t.TempDir made reachable by another user: it and its
// parents below the temp directory are 0755 (t.TempDir's are 0700).
func SharedTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		RequireNoError(t, os.Chmod(d, 0o755))
	}
	return dir
}
