package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The config is named through a chain of symlinks whose middle link
// lies in a directory user 65534 owns: sos.hcl -> evil/link -> etc/real
// (root's 0644 in root's 0755). filetrust checks the path's directory
// and the resolved one, never evil, so apply accepts it. 65534 flips the
// link between root's file and its own (in a root-owned sticky
// directory, so the resolved directory passes too); when apply's
// filetrust.Check sees root's file and its read then sees 65534's, apply
// writes 65534's sysctl as root. A race, but one 65534 runs as often as
// it likes (the daemon reloads at each flip it settles on); bounded to
// 300 applies here.
// Found by review (helper-86); on d23a2ff somaxconn becomes 31337, 65534's value.
func TestApplyRacesSymlinkChainThroughAnotherUsersDirectory(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "perl")
	dir := testsupport.SharedTempDir(t)
	root := filepath.Join(dir, "root")
	somaxconn := filepath.Join(root, "proc/sys/net/core/somaxconn")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/somaxconn": "128\n"})
	state := filepath.Join(dir, "state", "state.db")
	config := func(v string) string {
		return `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.somaxconn" = "` + v + `" } }
node "host1" { tuning = ["t"] }
daemon { state_path = "` + state + `" }
`
	}
	mkdir := func(d string, mode os.FileMode, uid int) {
		testsupport.RequireNoError(t, os.Mkdir(d, 0o755))
		testsupport.RequireNoError(t, os.Chown(d, uid, uid))
		testsupport.RequireNoError(t, os.Chmod(d, mode))
	}
	etc, evil, shared, cfgDir := filepath.Join(dir, "etc"), filepath.Join(dir, "evil"), filepath.Join(dir, "shared"), filepath.Join(dir, "cfg")
	mkdir(etc, 0o755, 0)
	mkdir(evil, 0o755, 65534)
	mkdir(shared, 0o777|os.ModeSticky, 0)
	mkdir(cfgDir, 0o755, 0)
	real := filepath.Join(etc, "sos.hcl")
	writeConfig(t, real, config("4096"))
	testsupport.RequireNoError(t, os.Chmod(real, 0o644))
	link := filepath.Join(evil, "link")
	testsupport.RequireNoError(t, os.Symlink(real, link))
	testsupport.RequireNoError(t, os.Lchown(link, 65534, 65534))
	cfg := filepath.Join(cfgDir, "sos.hcl")
	testsupport.RequireNoError(t, os.Symlink(link, cfg))
	mine := filepath.Join(shared, "mine.hcl")

	// User 65534 writes its config and flips its link, fast.
	out, err := testsupport.AsOtherUser(t, "sh", "-c",
		"printf '%s' '"+config("31337")+"' > "+mine).CombinedOutput()
	testsupport.Require(t, err == nil, "as 65534: %v %s", err, out)
	flip := testsupport.AsOtherUser(t, "perl", "-e", `
my ($link, $a, $b) = @ARGV; my $tmp = "$link.tmp";
for my $i (1 .. 50_000_000) { unlink $tmp; symlink(($i % 2) ? $b : $a, $tmp); rename($tmp, $link); }`, link, real, mine)
	testsupport.RequireNoError(t, flip.Start())
	t.Cleanup(func() { _ = flip.Process.Kill(); _ = flip.Wait() })

	args := []string{"apply", "--auto-approve", "-c", cfg, "--node", "host1", "--root", root}
	for i := range 300 {
		code, out, errOut := runCLI(t, args...)
		b, _ := os.ReadFile(somaxconn)
		if v := strings.TrimSpace(string(b)); v == "31337" {
			t.Errorf("apply %d of a config user 65534 can redirect wrote 65534's net.core.somaxconn=31337 as root (exit %d)\n%s%s", i+1, code, out, errOut)
			return
		}
	}
	t.Logf("300 applies: 65534's config never read after the check (the race held this time)")
}
