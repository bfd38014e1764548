package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestPlanOutIntoAPlaceOthersCanWrite: the operator saves a plan where
// every user can write, /tmp (here a sticky 01777 directory of the test),
// and another user got there first with the name. plan -out, run as root,
// must not write through their symlink (root's file at the other end
// would be truncated to a plan) nor into their file (they read what root
// saved, and keep it theirs). Found by review (helper-90): plan.go saves
// with os.WriteFile, which follows a symlink and truncates an existing
// file of anyone; on this host fs.protected_symlinks and
// fs.protected_regular are 0, as on many, so nothing else stops it.
func TestPlanOutIntoAPlaceOthersCanWrite(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	private := t.TempDir()
	shared := testsupport.SharedTempDir(t)
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	root := filepath.Join(private, "root")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/rmem_max": "212992\n"})
	cfg := filepath.Join(private, "sos.hcl")
	writeConfig(t, cfg, hostTuningFile("67108864", `daemon { state_path = "`+filepath.Join(private, "state.db")+`" }`))
	victim := filepath.Join(private, "precious")
	testsupport.RequireNoError(t, os.WriteFile(victim, []byte("root's own file\n"), 0o600))
	asNobody := func(script string) {
		t.Helper()
		out, err := testsupport.AsOtherUser(t, "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("as another user: %s: %v\n%s", script, err, out)
		}
	}
	plan := func(out string) (int, string) {
		code, stdout, stderr := runCLI(t, "plan", "-c", cfg, "--node", "host1", "--root", root, "-out", out)
		return code, stdout + stderr
	}

	t.Run("their symlink", func(t *testing.T) {
		out := filepath.Join(shared, "sos.plan")
		asNobody("ln -s " + victim + " " + out)
		code, said := plan(out)
		t.Logf("plan -out %s (their symlink to %s): exit %d\n%s", out, victim, code, said)
		if b, _ := os.ReadFile(victim); string(b) != "root's own file\n" {
			t.Errorf("plan -out wrote through another user's symlink: %s now holds\n%s", victim, headLines(string(b), 5))
		}
	})

	t.Run("their file", func(t *testing.T) {
		out := filepath.Join(shared, "other.plan")
		asNobody(": > " + out + " && chmod 0666 " + out)
		code, said := plan(out)
		t.Logf("plan -out %s (their 0666 file): exit %d\n%s", out, code, said)
		fi, err := os.Lstat(out)
		testsupport.RequireNoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		if code == 0 && (st.Uid != 0 || fi.Mode().Perm()&0o077 != 0) {
			read, _ := testsupport.AsOtherUser(t, "cat", out).CombinedOutput()
			t.Errorf("plan -out saved root's plan into another user's file (uid %d, mode %04o), exit 0; they read %d bytes of it:\n%s",
				st.Uid, fi.Mode().Perm(), len(read), headLines(string(read), 3))
		}
		if code != 0 && !strings.Contains(said, out) {
			t.Errorf("plan -out refused without naming the file: %s", said)
		}
	})
}

// TestKeygenOutThroughTheirSymlink: keygen --out into /tmp where another
// user planted the name as a symlink to root's file: refused (O_EXCL does
// not follow it), root's file untouched. Holds.
func TestKeygenOutThroughTheirSymlink(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	private := t.TempDir()
	shared := testsupport.SharedTempDir(t)
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	victim := filepath.Join(private, "precious")
	testsupport.RequireNoError(t, os.WriteFile(victim, []byte("root's own file\n"), 0o600))
	out := filepath.Join(shared, "agent.key")
	if b, err := testsupport.AsOtherUser(t, "ln", "-s", victim, out).CombinedOutput(); err != nil {
		t.Fatalf("as another user: %v\n%s", err, b)
	}
	code, stdout, stderr := runCLI(t, "keygen", "--out", out)
	if code == 0 {
		t.Errorf("keygen --out through another user's symlink: exit 0\n%s%s", stdout, stderr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's own file\n" {
		t.Errorf("keygen wrote through another user's symlink: %s now holds %q", victim, b)
	}
}
