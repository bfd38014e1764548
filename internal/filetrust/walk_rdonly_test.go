package filetrust

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// A read-only mount is taken as unwritable whatever its mode; but a bind
// mount remounted read-only is a view of a directory that stays
// writable by its other path. The operator shares a 0777 drop directory
// and binds it read-only where sosappliance reads its config (or a
// container runtime does, a volume mounted :ro). User 65534 writes the
// 0666 config through the drop directory, and Check trusts it by the
// read-only path. Review (helper-91); fails on 01833b3.
func TestReadOnlyBindOfAWritableDirectory(t *testing.T) {
	testsupport.RequireRoot(t, "mount", "umount", "setpriv")
	dir := testsupport.SharedTempDir(t)
	drop := filepath.Join(dir, "drop")
	testsupport.RequireNoError(t, os.Mkdir(drop, 0o777))
	testsupport.RequireNoError(t, os.Chmod(drop, 0o777))
	file := filepath.Join(drop, "sos.hcl")
	testsupport.RequireNoError(t, os.WriteFile(file, []byte("# root's\n"), 0o666))
	testsupport.RequireNoError(t, os.Chmod(file, 0o666))
	etc := filepath.Join(dir, "etc")
	testsupport.RequireNoError(t, os.Mkdir(etc, 0o755))
	for _, args := range [][]string{{"--bind", drop, etc}, {"-o", "remount,bind,ro", etc}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
		if args[0] == "--bind" {
			t.Cleanup(func() { _ = exec.Command("umount", etc).Run() })
		}
	}
	cfg := filepath.Join(etc, "sos.hcl")
	if out, err := testsupport.AsOtherUser(t, "sh", "-c", "echo '# 65534s' > "+file).CombinedOutput(); err != nil {
		t.Fatalf("65534 writing %s: %v: %s", file, err, out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "# 65534s\n" {
		t.Fatalf("65534's write not seen through the bind: %q", b)
	}
	if err := Check("config file", cfg); err == nil {
		t.Errorf("%s, 0666 on a read-only bind of %s (0777), which user 65534 just wrote through, was trusted", cfg, drop)
	}
}
