package main

// The real CLI and daemon when the state directory's filesystem fills up,
// made for real: a small tmpfs in a private mount namespace of a child
// test process (no filesystem of the host is touched).
//
// Found and written by review (helper-92).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFirstCommandOnAFullStateDisk: the first command of a node (apply,
// plan, or the daemon's start) whose state directory is on a full
// filesystem fails, as it must, naming the state file and the full disk,
// without touching the host. But bbolt created the file before its first
// write failed, and left it empty (or, with a page or two of room, cut
// short): once the room is back, every apply, plan, rollback and daemon
// start refuses "state database ... is damaged: the file is empty (0
// bytes) [or: it is truncated]; the values it recorded before the
// appliance changed the host cannot be read from it: restore it from a
// backup", for a database that never recorded anything. The operator is
// told recorded values were lost, and must remove the file by hand. The
// next apply should recover by itself (the file was never a database).
// It did (store.Open left the file bolt.Open created when its
// initialisation failed); now store.Open removes it.
func TestFirstCommandOnAFullStateDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	for _, first := range []string{"apply", "plan", "run"} {
		for _, leave := range []int{0, 2} {
			n := newTuningNode(t)
			writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
			state := filepath.Join(testsupport.Tmpfs(t, "128k"), "state.db")
			args := func(cmd ...string) []string {
				return append(cmd, "-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root)
			}
			free := testsupport.FillFS(t, filepath.Dir(state), leave)
			var code int
			var out, errOut string
			switch first {
			case "apply":
				code, out, errOut = runCLI(t, args("apply", "--auto-approve")...)
			case "plan":
				code, out, errOut = runCLI(t, args("plan")...)
			case "run":
				var exit error
				var ran bool
				errOut, exit, ran = statedbChild(t, args("run", "--control-socket", n.socket, "--metrics-listen", "", "--drift-interval", "1h")...)
				if ran || exit == nil {
					t.Errorf("run on a full state disk kept running or exited 0 (%v)", exit)
				}
				code = 1
			}
			if code != 1 || !strings.Contains(out+errOut, state) || !strings.Contains(out+errOut, "no space left on device") {
				t.Errorf("%s with %d pages of room: exit %d, want 1 with an error naming %s and the full disk:\n%s%s",
					first, leave, code, state, headLines(out, 5), headLines(errOut, 5))
			}
			if got := rmemMaxIn(t, n.root); got != "212992" {
				t.Errorf("%s with %d pages of room changed the host: rmem_max %s", first, leave, got)
			}
			left := "nothing"
			if fi, err := os.Stat(state); err == nil {
				left = fmt.Sprintf("%d bytes", fi.Size())
			}
			free()
			code, out, errOut = runCLI(t, args("apply", "--auto-approve")...)
			if code != 0 || rmemMaxIn(t, n.root) != "67108864" {
				t.Errorf("%s with %d pages of room left %s at the state path; apply once the room is back: exit %d, rmem_max %s:\n%s%s",
					first, leave, left, code, rmemMaxIn(t, n.root), headLines(out, 5), errOut)
				continue
			}
			code, out, errOut = runCLI(t, args("rollback", "--auto-approve")...)
			if code != 0 || rmemMaxIn(t, n.root) != "212992" {
				t.Errorf("%s: rollback: exit %d, rmem_max %s:\n%s%s", first, code, rmemMaxIn(t, n.root), out, errOut)
			}
		}
	}
}

// manyIfaces is how many interfaces the mid-apply test tunes.
const manyIfaces = 60

func manySysctlsFile(value string) string {
	var b strings.Builder
	b.WriteString(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = {
    "net.core.rmem_max" = "` + value + `"
`)
	for i := range manyIfaces {
		fmt.Fprintf(&b, "    \"net.ipv4.conf.rv92x%02d.rp_filter\" = \"%s\"\n", i, map[bool]string{true: "2", false: "1"}[value != "212992"])
	}
	b.WriteString("  }\n}\nnode \"host1\" { tuning = [\"t\"] }\n")
	return b.String()
}

// TestApplyThatFillsTheStateDisk (a walk over how much room is left):
// after a first apply of one sysctl, the state disk is filled but for
// k pages (k = 0..12), and the file grows to 61 sysctls. Wherever the
// apply runs out of room (its start, an item's record, its finish), it
// must exit 1 naming the state file and the full disk; every sysctl on
// the host must be its original or its new value, the database must open
// (bbolt's own consistency check passes), and once the room is back an
// apply converges and a rollback puts back every original value.
func TestApplyThatFillsTheStateDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	for k := 0; k <= 12; k++ {
		state := filepath.Join(testsupport.Tmpfs(t, "256k"), "state.db")
		root, cfg, cli := manySysctlsHost(t, state)
		writeConfig(t, cfg, hostTuningFile("67108864", ""))
		if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
			t.Fatalf("k=%d: first apply: exit %d\n%s%s", k, code, out, errOut)
		}
		writeConfig(t, cfg, manySysctlsFile("67108865"))
		free := testsupport.FillFS(t, filepath.Dir(state), k)
		code, out, errOut := cli("apply", "--auto-approve")
		changed := 0
		for i := range manyIfaces {
			b, _ := os.ReadFile(rpFilterOf(root, i))
			switch v := strings.TrimSpace(string(b)); v {
			case "1":
			case "2":
				changed++
			default:
				t.Errorf("k=%d: rv92x%02d rp_filter is %q", k, i, v)
			}
		}
		t.Logf("k=%d: apply exit %d, %d of %d items changed", k, code, changed, manyIfaces)
		if code != 0 && (!strings.Contains(errOut, state) || !strings.Contains(errOut, "no space left on device")) {
			t.Errorf("k=%d: apply on a full state disk: exit %d, want an error naming %s and the full disk:\n%s%s",
				k, code, state, headLines(out, 5), errOut)
		}
		if code != 0 && code != 1 {
			t.Errorf("k=%d: apply exit %d:\n%s", k, code, errOut)
		}
		db, err := bolt.Open(state, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			t.Fatalf("k=%d: the state database does not open after the failed apply: %v", k, err)
		}
		if err := db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Errorf("k=%d: the state database is inconsistent after the failed apply: %v", k, err)
		}
		db.Close()
		free()
		if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
			t.Fatalf("k=%d: apply once the room is back: exit %d\n%s%s", k, code, out, errOut)
		}
		if code, out, errOut := cli("rollback", "--auto-approve"); code != 0 {
			t.Fatalf("k=%d: rollback: exit %d\n%s%s", k, code, out, errOut)
		}
		rolledBackWhole(t, k, root, state)
	}
}

// ext4Disk is an ext4 filesystem in an image file, loop-mounted with
// errors=remount-ro (in the test's own mount namespace) on a temp dir
// only root can enter, unmounted when the test ends.
type ext4Disk struct {
	t        *testing.T
	img, mnt string
	mounted  bool
}

func newExt4Disk(t *testing.T, img, size string) *ext4Disk {
	t.Helper()
	d := &ext4Disk{t: t, img: img, mnt: t.TempDir()}
	d.sh("truncate", "-s", size, img)
	d.sh("mkfs.ext4", "-q", "-F", img)
	d.mount()
	t.Cleanup(func() {
		if d.mounted {
			exec.Command("umount", "-l", d.mnt).Run()
		}
	})
	if err := os.Chmod(d.mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *ext4Disk) sh(name string, args ...string) string {
	d.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		d.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func (d *ext4Disk) mount() {
	d.t.Helper()
	d.sh("mount", "-o", "loop,errors=remount-ro", d.img, d.mnt)
	d.mounted = true
}

// checkAndRemount unmounts the filesystem, has e2fsck repair it (its
// exit 1, errors corrected, is logged) and mounts it again.
func (d *ext4Disk) checkAndRemount() {
	d.t.Helper()
	d.sh("umount", d.mnt)
	d.mounted = false
	if out, err := exec.Command("e2fsck", "-fy", d.img).CombinedOutput(); err != nil {
		d.t.Logf("e2fsck: %v\n%s", err, out)
	}
	d.mount()
}

// rpFilterOf is where interface i's rp_filter of manySysctlsFile is
// under root.
func rpFilterOf(root string, i int) string {
	return filepath.Join(root, fmt.Sprintf("proc/sys/net/ipv4/conf/rv92x%02d/rp_filter", i))
}

// rpFiltersNot counts the interfaces of manySysctlsFile whose rp_filter
// under root is not want.
func rpFiltersNot(root, want string) int {
	c := 0
	for i := range manyIfaces {
		b, _ := os.ReadFile(rpFilterOf(root, i))
		if strings.TrimSpace(string(b)) != want {
			c++
		}
	}
	return c
}

// driftRpFilters sets every rp_filter of manySysctlsFile under root back
// to the host's 1, behind the daemon's back.
func driftRpFilters(root string) {
	for i := range manyIfaces {
		os.WriteFile(rpFilterOf(root, i), []byte("1\n"), 0o644)
	}
}

// startDriftDaemon runs the daemon of n (manySysctlsFile, state at
// state) checking drift every second; alive fails the test once it has
// exited.
func startDriftDaemon(t *testing.T, n tuningNode, state string) (d *testsupport.Daemon, alive func()) {
	t.Helper()
	d = testsupport.StartDaemon(t, testsupport.Command(t, mainChild, "run", "-c", n.cfg, "--node", "host1",
		"--state", state, "--control-socket", n.socket,
		"--root", n.root, "--metrics-listen", "", "--drift-interval", "1s", "--settle", "50ms"))
	return d, func() {
		t.Helper()
		select {
		case <-d.Done():
			t.Fatalf("the daemon exited (%v):\n%s", d.Err(), headLines(d.Output.String(), 30))
		default:
		}
	}
}

// writeManySysctlsTree makes the host of manySysctlsFile under root:
// rmem_max 212992 and the interfaces' rp_filter 1.
func writeManySysctlsTree(t *testing.T, root string) {
	t.Helper()
	tree := map[string]string{"proc/sys/net/core/rmem_max": "212992\n"}
	for i := range manyIfaces {
		tree[fmt.Sprintf("proc/sys/net/ipv4/conf/rv92x%02d/rp_filter", i)] = "1\n"
	}
	testsupport.WriteTree(t, root, tree)
}

// manySysctlsHost is a temp host of manySysctlsFile with its config
// path, and the CLI run as its node host1 with state at state.
func manySysctlsHost(t *testing.T, state string) (root, cfg string, cli func(cmd ...string) (int, string, string)) {
	t.Helper()
	dir := t.TempDir()
	root, cfg = filepath.Join(dir, "root"), filepath.Join(dir, "sos.hcl")
	writeManySysctlsTree(t, root)
	return root, cfg, func(cmd ...string) (int, string, string) {
		return runCLI(t, append(cmd, "-c", cfg, "--node", "host1", "--state", state, "--root", root)...)
	}
}

// rolledBackWhole checks that a rollback (of the walk's step k) put the
// host's originals back and left no record in the state database.
func rolledBackWhole(t *testing.T, k int, root, state string) {
	t.Helper()
	if got := rmemMaxIn(t, root); got != "212992" {
		t.Errorf("k=%d: rollback left rmem_max %s, want the host's 212992", k, got)
	}
	for i := range manyIfaces {
		b, _ := os.ReadFile(rpFilterOf(root, i))
		if v := strings.TrimSpace(string(b)); v != "1" {
			t.Errorf("k=%d: rollback left rv92x%02d rp_filter %q, want the host's 1", k, i, v)
		}
	}
	st, err := store.Open(state, store.Options{MustExist: true})
	if err != nil {
		t.Fatalf("k=%d: %v", k, err)
	}
	recs, _ := st.Records()
	st.Close()
	if len(recs) != 0 {
		t.Errorf("k=%d: %d records left after the rollback", k, len(recs))
	}
}

// TestPlanOutToAFullDisk (held): plan -out into a full directory exits 1
// naming the full disk and the directory, and leaves neither a plan file
// nor its temp file; an apply of that name then finds nothing.
func TestPlanOutToAFullDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	outDir := testsupport.Tmpfs(t, "64k")
	out := filepath.Join(outDir, "saved.plan")
	free := testsupport.FillFS(t, outDir, 0)
	defer free()
	code, stdout, errOut := runCLI(t, "plan", "-out", out, "-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root)
	if code != 1 || !strings.Contains(errOut, "no space left on device") || !strings.Contains(errOut, outDir) {
		t.Errorf("plan -out to a full disk: exit %d, want 1 naming the full disk and %s:\n%s%s", code, outDir, headLines(stdout, 5), errOut)
	}
	entries, _ := os.ReadDir(outDir)
	for _, e := range entries {
		if e.Name() != "fill-the-filesystem" {
			t.Errorf("left in the plan's directory: %s", e.Name())
		}
	}
	code, _, errOut = runCLI(t, "apply", out, "-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root)
	if code == 0 || rmemMaxIn(t, n.root) != "212992" {
		t.Errorf("apply of the plan that was not saved: exit %d, rmem_max %s\n%s", code, rmemMaxIn(t, n.root), errOut)
	}
}

// TestDaemonWhileItsStateDiskIsFull: a running daemon whose state
// directory fills up. Drift it cannot record is not corrected, and each
// failed check says so naming the state file and the full disk; the
// daemon keeps running, and once the room is back it corrects the drift
// by itself.
func TestDaemonWhileItsStateDiskIsFull(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	n := newTuningNode(t)
	writeConfig(t, n.cfg, manySysctlsFile("67108864"))
	writeManySysctlsTree(t, n.root)
	state := filepath.Join(testsupport.Tmpfs(t, "256k"), "state.db")
	d, alive := startDriftDaemon(t, n, state)
	drifted := func() int { return rpFiltersNot(n.root, "2") }
	testsupport.Eventually(t, 30*time.Second, "first convergence", func() bool {
		alive()
		return drifted() == 0 && rmemMaxIn(t, n.root) == "67108864" && strings.Contains(d.Output.String(), "msg=ready")
	})
	free := testsupport.FillFS(t, filepath.Dir(state), 0)
	mark := len(d.Output.String())
	for round := 0; round < 6; round++ {
		driftRpFilters(n.root)
		time.Sleep(1500 * time.Millisecond)
		alive()
		t.Logf("round %d: %d items drifted", round, drifted())
	}
	during := d.Output.String()[mark:]
	t.Logf("daemon output while the disk was full:\n%s", headLines(during, 40))
	if drifted() != 0 && (!strings.Contains(during, state) || !strings.Contains(during, "no space left on device")) {
		t.Errorf("drift not corrected while the state disk is full, and the log does not name %s and the full disk", state)
	}
	free()
	testsupport.Eventually(t, 30*time.Second, "correction once the room is back", func() bool { alive(); return drifted() == 0 })
	alive()
}

// TestDaemonWhenItsStateFilesystemTurnsReadOnly: the state directory is
// an ext4 filesystem (a loop-mounted image) mounted errors=remount-ro,
// and mid-run it meets an error (trigger_fs_error) and the kernel makes
// it read-only under the daemon, which holds the database open. The
// daemon keeps running; each drift check it cannot record fails naming
// the state file and the read-only filesystem; it changes nothing it
// could not record. After the filesystem is checked and mounted again, a
// restarted daemon converges from the same records and a rollback puts
// back every original value: nothing recorded was lost.
func TestDaemonWhenItsStateFilesystemTurnsReadOnly(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	testsupport.RequireRoot(t, "mkfs.ext4", "e2fsck", "findmnt", "mount", "umount")
	disk := newExt4Disk(t, filepath.Join(t.TempDir(), "state.img"), "16M")
	mnt, sh := disk.mnt, disk.sh
	state := filepath.Join(mnt, "state.db")

	n := newTuningNode(t)
	writeConfig(t, n.cfg, manySysctlsFile("67108864"))
	writeManySysctlsTree(t, n.root)
	drifted := func() int { return rpFiltersNot(n.root, "2") }
	d, alive := startDriftDaemon(t, n, state)
	testsupport.Eventually(t, 30*time.Second, "first convergence", func() bool {
		alive()
		return drifted() == 0 && rmemMaxIn(t, n.root) == "67108864" && strings.Contains(d.Output.String(), "msg=ready")
	})

	dev := filepath.Base(sh("findmnt", "-n", "-o", "SOURCE", mnt))
	if err := os.WriteFile("/sys/fs/ext4/"+dev+"/trigger_fs_error", []byte("review92\n"), 0o200); err != nil {
		t.Fatalf("trigger an ext4 error on %s: %v", dev, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "probe"), nil, 0o600); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("the state filesystem did not turn read-only: %v", err)
	}
	mark := len(d.Output.String())
	for round := 0; round < 4; round++ {
		driftRpFilters(n.root)
		time.Sleep(1500 * time.Millisecond)
		alive()
	}
	during := d.Output.String()[mark:]
	t.Logf("daemon output while the state filesystem is read-only:\n%s", headLines(during, 20))
	if got := drifted(); got != manyIfaces {
		t.Errorf("%d of %d drifted items corrected while the state could not record it", manyIfaces-got, manyIfaces)
	}
	if !strings.Contains(during, state) || !strings.Contains(during, "read-only file system") {
		t.Errorf("the daemon's log while its state filesystem is read-only does not name %s and the read-only filesystem", state)
	}
	d.Kill()

	disk.checkAndRemount()
	d, alive = startDriftDaemon(t, n, state)
	testsupport.Eventually(t, 30*time.Second, "convergence after the filesystem came back", func() bool { alive(); return drifted() == 0 })
	d.Kill()
	code, out, errOut := runCLI(t, "rollback", "--auto-approve", "-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root)
	if code != 0 || drifted() != manyIfaces || rmemMaxIn(t, n.root) != "212992" {
		t.Errorf("rollback after the filesystem came back: exit %d, %d of %d items back, rmem_max %s\n%s%s",
			code, drifted(), manyIfaces, rmemMaxIn(t, n.root), headLines(out, 5), errOut)
	}
}

// TestApplyOfACutPlanFile: savePlan moves its temp file into place
// without an fsync, so a crash (or the power going) soon after `plan
// -out` can leave the plan file empty or cut short on a real disk (ext4
// delayed allocation). Made here by cutting a saved plan at every length
// from 0 to its last byte: apply of each exits 1 naming the plan file,
// and the host is untouched.
func TestApplyOfACutPlanFile(t *testing.T) {
	n := newTuningNode(t)
	writeConfig(t, n.cfg, hostTuningFile("67108864", ""))
	state := filepath.Join(n.dir, "state.db")
	common := []string{"-c", n.cfg, "--node", "host1", "--state", state, "--root", n.root}
	if code, out, errOut := runCLI(t, append([]string{"apply", "--auto-approve"}, common...)...); code != 0 {
		t.Fatalf("apply: %d\n%s%s", code, out, errOut)
	}
	writeConfig(t, n.cfg, hostTuningFile("300000", ""))
	saved := filepath.Join(n.dir, "saved.plan")
	if code, out, errOut := runCLI(t, append([]string{"plan", "-out", saved}, common...)...); code != 0 {
		t.Fatalf("plan -out: %d\n%s%s", code, out, errOut)
	}
	whole, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(n.dir, "cut.plan")
	shown := 0
	for l := 0; l < len(whole)-1; l += 1 + l/8 {
		if err := os.WriteFile(cut, whole[:l], 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, append([]string{"apply", cut}, common...)...)
		if shown < 2 && (l == 0 || l > len(whole)/2) {
			t.Logf("apply of the plan cut to %d bytes: exit %d: %s", l, code, strings.TrimSpace(errOut))
			shown++
		}
		if code != 1 || !strings.Contains(errOut, cut) {
			t.Errorf("apply of the plan cut to %d of %d bytes: exit %d, want 1 with an error naming %s:\n%s%s", l, len(whole), code, cut, headLines(out, 5), errOut)
		}
		if got := rmemMaxIn(t, n.root); got != "67108864" {
			t.Fatalf("apply of the plan cut to %d bytes changed the host: rmem_max %s", l, got)
		}
	}
}

// TestKeygenOnAFullDisk (held): keygen --out into a full filesystem exits
// 1 naming the file and the full disk, prints no public key, and leaves
// no (empty) key file behind that a later keygen would refuse as "may be
// in use".
func TestKeygenOnAFullDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	out := filepath.Join(dir, "agent.key")
	free := testsupport.FillFS(t, dir, 0)
	code, stdout, stderr := runCLI(t, "keygen", "--out", out)
	if code != 1 || !strings.Contains(stderr, out) || !strings.Contains(stderr, "no space left on device") || strings.Contains(stdout, "public_key") {
		t.Errorf("keygen on a full disk: exit %d, want 1 naming %s and the full disk, no public key:\n%s%s", code, out, stdout, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("keygen on a full disk left %s", out)
	}
	free()
	if code, stdout, stderr := runCLI(t, "keygen", "--out", out); code != 0 {
		t.Errorf("keygen once the room is back: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestRollbackThatFillsTheStateDisk (a walk over how much room is left):
// after an apply of 61 sysctls the state disk is filled but for k pages
// (k = 0..8) and a rollback runs. Wherever it runs out of room it exits 1
// naming the state file and the full disk, every sysctl is its original
// or its applied value, and once the room is back a second rollback puts
// back every original value and leaves no record.
func TestRollbackThatFillsTheStateDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	for k := 0; k <= 8; k++ {
		state := filepath.Join(testsupport.Tmpfs(t, "256k"), "state.db")
		root, cfg, cli := manySysctlsHost(t, state)
		writeConfig(t, cfg, manySysctlsFile("67108865"))
		if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
			t.Fatalf("k=%d: apply: exit %d\n%s%s", k, code, out, errOut)
		}
		free := testsupport.FillFS(t, filepath.Dir(state), k)
		code, out, errOut := cli("rollback", "--auto-approve")
		back := 0
		for i := range manyIfaces {
			b, _ := os.ReadFile(rpFilterOf(root, i))
			switch v := strings.TrimSpace(string(b)); v {
			case "1":
				back++
			case "2":
			default:
				t.Errorf("k=%d: rv92x%02d rp_filter is %q", k, i, v)
			}
		}
		t.Logf("k=%d: rollback exit %d, %d of %d items back", k, code, back, manyIfaces)
		if code != 0 && (code != 1 || !strings.Contains(errOut, state) || !strings.Contains(errOut, "no space left on device")) {
			t.Errorf("k=%d: rollback on a full state disk: exit %d, want 1 with an error naming %s and the full disk:\n%s%s",
				k, code, state, headLines(out, 5), errOut)
		}
		free()
		if code != 0 {
			if code, out, errOut := cli("rollback", "--auto-approve"); code != 0 {
				t.Errorf("k=%d: rollback once the room is back: exit %d\n%s%s", k, code, headLines(out, 10), errOut)
			}
		}
		rolledBackWhole(t, k, root, state)
	}
}

// TestApplyWhenTheStateDiskFailsWrites (held): the state directory is an ext4
// filesystem on a loop device whose backing file sits on a tmpfs that
// then fills: every write the filesystem sends to its device from then
// on fails (EIO to ext4, "critical space allocation error" in dmesg), as
// a failing disk's would. An apply then must not report success for
// what it could not record; once the disk works again (room, fsck,
// mount) the state database opens, or is refused as damaged naming the
// file, and never crashes a command.
func TestApplyWhenTheStateDiskFailsWrites(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	testsupport.RequireRoot(t, "mkfs.ext4", "e2fsck", "mount", "umount")
	outer := testsupport.Tmpfs(t, "8m")
	disk := newExt4Disk(t, filepath.Join(outer, "state.img"), "32M")
	mnt := disk.mnt
	state := filepath.Join(mnt, "state.db")
	root, cfg, cli := manySysctlsHost(t, state)
	writeConfig(t, cfg, hostTuningFile("67108864", ""))
	if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
		t.Fatalf("first apply: exit %d\n%s%s", code, out, errOut)
	}
	free := testsupport.FillFS(t, outer, 0)
	writeConfig(t, cfg, manySysctlsFile("67108865"))
	code, out, errOut := cli("apply", "--auto-approve")
	t.Logf("apply on the failing disk: exit %d\n%s%s", code, headLines(out, 3), errOut)
	if code == 0 {
		t.Errorf("apply on a disk that fails its writes exited 0")
	} else if !strings.Contains(errOut, state) {
		t.Errorf("apply on a disk that fails its writes does not name the state file %s", state)
	}
	d, _ := exec.Command("dmesg").CombinedOutput()
	t.Logf("kernel:\n%s", lastLines(string(d), 6))
	free()
	disk.checkAndRemount()
	for _, c := range [][]string{{"plan"}, {"apply", "--auto-approve"}, {"rollback", "--auto-approve"}} {
		code, out, errOut := cli(c...)
		t.Logf("%s after the disk came back: exit %d\n%s%s", c[0], code, headLines(out, 3), errOut)
		if strings.Contains(errOut, "panic") || strings.Contains(errOut, "fatal error") {
			t.Errorf("%s crashed", c[0])
		}
		if code != 0 && !strings.Contains(errOut, state) {
			t.Errorf("%s failed without naming the state file", c[0])
		}
	}
	if got := rmemMaxIn(t, root); got != "212992" {
		t.Errorf("the rollback after the disk came back left rmem_max %s, want the host's 212992", got)
	}
	for i := range manyIfaces {
		b, _ := os.ReadFile(rpFilterOf(root, i))
		if v := strings.TrimSpace(string(b)); v != "1" {
			t.Errorf("the rollback after the disk came back left rv92x%02d rp_filter %q, want the host's 1", i, v)
		}
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestDaemonLogsAFullStateDiskOnce: while the state disk stays full, each
// drift check (every second here, every 30 s by default: 2,880 a day)
// logs the same "drift check failed ... no space left on device" line
// at ERROR, as long as the condition lasts. The relay (limited) and the
// controller ("logged once until it changes") say a lasting condition
// once; the daemon's drift check floods its log, and on a node whose
// /var/lib is full its journal, with the same line. Over 8 failed checks
// this wants at most 3 lines. checkDriftLocked logged every failure;
// now a lasting one is logged once (driftFailure).
func TestDaemonLogsAFullStateDiskOnce(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	n := newTuningNode(t)
	writeConfig(t, n.cfg, manySysctlsFile("67108864"))
	writeManySysctlsTree(t, n.root)
	state := filepath.Join(testsupport.Tmpfs(t, "256k"), "state.db")
	d, alive := startDriftDaemon(t, n, state)
	testsupport.Eventually(t, 30*time.Second, "first convergence", func() bool {
		alive()
		return rpFiltersNot(n.root, "2") == 0 && strings.Contains(d.Output.String(), "msg=ready")
	})
	free := testsupport.FillFS(t, filepath.Dir(state), 0)
	defer free()
	driftRpFilters(n.root)
	// Failed checks as status shows them: each a new last_check with
	// the full disk as the last apply's result.
	const checks = 8
	seen := map[string]bool{}
	testsupport.Eventually(t, 60*time.Second, fmt.Sprintf("%d failed drift checks", checks), func() bool {
		_, out, _ := runCLI(t, "status", "-c", n.cfg, "--control-socket", n.socket, "--json")
		var st struct {
			LastApply *struct {
				Result string `json:"result"`
			} `json:"last_apply"`
			Drift struct {
				LastCheck string `json:"last_check"`
			} `json:"drift"`
		}
		if json.Unmarshal([]byte(out), &st) == nil && st.LastApply != nil && strings.Contains(st.LastApply.Result, "no space left on device") {
			seen[st.Drift.LastCheck] = true
		}
		return len(seen) >= checks
	})
	// Any line that says it, however it says it (once, or once and then
	// a reminder now and then): the count is of the same failure logged
	// again.
	if got := strings.Count(d.Output.String(), "no space left on device"); got > 3 {
		t.Errorf("%d drift checks failing on the same full state disk logged the failure %d times:\n%s", len(seen), got, lastLines(d.Output.String(), 4))
	}
}
