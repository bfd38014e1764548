package appliance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadAfterConfigDirReplaced: config management that replaces the
// whole directory holding sos.hcl (rm -rf and unpack, or rename a staged
// directory into place). Before, the watcher kept watching the old
// directory's inode and took its path as watched, so it never added the
// new directory: the swap itself was taken, but no edit after it, until
// a SIGHUP, and nothing said so. Now it watches each directory's parent
// too and watches a directory again when another stands at its path.
// Found by review (helper-58).
func TestReloadAfterConfigDirReplaced(t *testing.T) {
	for _, how := range []string{"rename", "remove"} {
		t.Run(how, func(t *testing.T) {
			root, dir := tempHost(t), t.TempDir()
			etc := filepath.Join(dir, "etc")
			if err := os.Mkdir(etc, 0o755); err != nil {
				t.Fatal(err)
			}
			cfgPath := filepath.Join(etc, "sos.hcl")
			writeFile(t, cfgPath, daemonConfig("100000"))
			td := startDaemon(t, root, dir, cfgPath, time.Hour)
			td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

			switch how {
			case "rename":
				staged := filepath.Join(dir, "etc.new")
				if err := os.Mkdir(staged, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(staged, "sos.hcl"), daemonConfig("200000"))
				if err := os.Rename(etc, filepath.Join(dir, "etc.old")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(staged, etc); err != nil {
					t.Fatal(err)
				}
			case "remove":
				if err := os.RemoveAll(etc); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(etc, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, cfgPath, daemonConfig("200000"))
			}
			td.waitFor("the swapped directory's file applied", func() bool { return td.sysctl("net.core.rmem_max") == "200000" })

			// An ordinary edit in the new directory afterwards.
			writeFile(t, cfgPath, daemonConfig("300000"))
			td.waitFor("an edit in the new directory applied", func() bool { return td.sysctl("net.core.rmem_max") == "300000" })
		})
	}
}

// TestReloadOfHalfWrittenFile: a file truncated and written in two parts
// with a pause (a slow writer, a full disk) is refused while half
// written, with the position in status; the old config keeps running;
// the completed file is taken. So is an empty file, and a file deleted
// and written again. Written by review (helper-58); it passed.
func TestReloadOfHalfWrittenFile(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })
	pos := regexp.MustCompile(`sos\.hcl:\d+:\d+: `)

	full := daemonConfig("200000")
	writeFile(t, cfgPath, full[:len(full)/2])
	td.waitFor("the half-written file refused", func() bool { return td.status().ReloadFails == 1 })
	st := td.status()
	if td.sysctl("net.core.rmem_max") != "100000" || len(st.LastReload.Problems) == 0 || !pos.MatchString(st.LastReload.Problems[0]) {
		t.Errorf("half-written file: rmem_max %s, last reload %+v", td.sysctl("net.core.rmem_max"), st.LastReload)
	}
	writeFile(t, cfgPath, full)
	td.waitFor("the completed file applied", func() bool { return td.sysctl("net.core.rmem_max") == "200000" })

	writeFile(t, cfgPath, "")
	td.waitFor("the empty file refused", func() bool { return td.status().ReloadFails == 2 })
	st = td.status()
	if len(st.LastReload.Problems) == 0 || !strings.Contains(st.LastReload.Problems[0], "empty") {
		t.Errorf("empty file: %+v", st.LastReload)
	}
	if err := os.Remove(cfgPath); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfgPath, daemonConfig("300000"))
	td.waitFor("the recreated file applied", func() bool { return td.sysctl("net.core.rmem_max") == "300000" })
	if r := td.status().LastReload; r == nil || r.Result != "ok" {
		t.Errorf("after the good edit: %+v", r)
	}
}

func inodeOf(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestWatchDirRecreatedWithTheSameInode: config management removes the
// directory holding the file and unpacks a new one. The kernel drops the
// watch of a directory removed; on ext4 (and most file systems) the new
// directory often gets the inode number the old one freed, and the first
// watchDir's os.SameFile took it for the one still watched and never
// added it again: the next edit went unseen until a SIGHUP. A directory
// an event says went is now watched anew. Found by review (helper-60).
func TestWatchDirRecreatedWithTheSameInode(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "conf")
	path := filepath.Join(dir, "sos.hcl")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	orig := inodeOf(t, dir)
	// A settle long enough that the watcher looks at nothing while the
	// directory is replaced below.
	cw, err := NewConfigWatcher(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// Remove and unpack, as config management does; the inode number
	// the new directory gets is the file system's choice.
	same := false
	for i := 0; i < 200 && !same; i++ {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		same = inodeOf(t, dir) == orig
	}
	t.Logf("new directory has the old inode number %d: %v", orig, same)
	if err := os.WriteFile(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitChange(t, cw, "directory replaced") // seen from the parent
	// Now an edit in place, in the new directory.
	if err := os.WriteFile(path, []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitChange(t, cw, "edit after the directory was replaced (same inode number)")
}

// TestBusyParentHoldsNoReloadOff: the parent of the config's directory
// is watched (/etc for /etc/sosappliance/sos.hcl). In the first version
// every event there restarted the settle timer, and a sibling written
// more often than the settle time (a lease file) held every edit of the
// config off for as long as it went on. Now an event in a parent counts
// only when it names a directory of the path, and events that keep
// coming hold a look off for maxSettle at most. Found by review
// (helper-60).
func TestBusyParentHoldsNoReloadOff(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "sosappliance")
	path := filepath.Join(dir, "sos.hcl")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	cw, err := NewConfigWatcher(path, 200*time.Millisecond) // run's default --settle
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cw.Run(ctx) }()
	busyStop, busyDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(busyDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-busyStop:
				return
			case <-tick.C:
				_ = os.WriteFile(filepath.Join(parent, "busy.lease"), []byte{byte(i)}, 0o644)
			}
		}
	}()
	t.Cleanup(func() { close(busyStop); <-busyDone; cancel(); <-done })

	time.Sleep(100 * time.Millisecond) // the parent is busy already
	if err := os.WriteFile(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitChange(t, cw, "edit of the config while a sibling of its directory is written every 20ms")
}

func startWatcher(t *testing.T, path string, settle time.Duration) *ConfigWatcher {
	t.Helper()
	cw, err := NewConfigWatcher(path, settle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return cw
}

func writeOrFail(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func watchedDirs(cw *ConfigWatcher) []string {
	var ks []string
	for k := range cw.dirs {
		ks = append(ks, k)
	}
	return ks
}

// TestSymlinkedDirInGivenPath: --config /srv/sos/current/sos.hcl,
// where current is a symlink to a release directory that a deploy swaps
// (ln -s releases/2 current.new; mv -T current.new current). Before,
// only the release directory and its parent were watched and the swap
// was never seen; now the directory holding each link on the path is
// watched too. Found by review (helper-61).
func TestSymlinkedDirInGivenPath(t *testing.T) {
	d := t.TempDir()
	writeOrFail(t, filepath.Join(d, "releases", "1", "sos.hcl"), "one")
	writeOrFail(t, filepath.Join(d, "releases", "2", "sos.hcl"), "two")
	if err := os.Symlink(filepath.Join(d, "releases", "1"), filepath.Join(d, "current")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, "current", "sos.hcl")
	cw := startWatcher(t, path, 50*time.Millisecond)
	if err := os.Symlink(filepath.Join(d, "releases", "2"), filepath.Join(d, "current.new")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d, "current.new"), filepath.Join(d, "current")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	t.Logf("%s reads %q now; watched: %v", path, b, watchedDirs(cw))
	waitChange(t, cw, "the symlinked directory of the given path swapped")
}

// TestDotDotAfterSymlink: a path with ".." after a symlinked
// directory: the kernel resolves ".." from the link's target, Dir/Clean
// lexically. Before, the watcher watched the wrong directory; now it
// resolves the directory as given. Found by review (helper-61).
func TestDotDotAfterSymlink(t *testing.T) {
	d := t.TempDir()
	writeOrFail(t, filepath.Join(d, "real", "sos.hcl"), "one")
	if err := os.MkdirAll(filepath.Join(d, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "real", "sub"), filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	path := d + "/link/../sos.hcl"
	cw := startWatcher(t, path, 50*time.Millisecond)
	writeOrFail(t, filepath.Join(d, "real", "sos.hcl"), "two")
	b, _ := os.ReadFile(path)
	t.Logf("%s reads %q; watched: %v", path, b, watchedDirs(cw))
	waitChange(t, cw, "edit of the file a path with '..' names")
}

// TestRelativeAndForeignRename: a relative config path; a file
// replaced by a rename from another directory; deleted and recreated.
// Written by review (helper-61); it passed.
func TestRelativeAndForeignRename(t *testing.T) {
	d := t.TempDir()
	other := t.TempDir()
	writeOrFail(t, filepath.Join(d, "conf", "sos.hcl"), "one")
	t.Chdir(d)
	cw := startWatcher(t, "conf/../conf/sos.hcl", 50*time.Millisecond)
	writeOrFail(t, filepath.Join(other, "new"), "two")
	if err := os.Rename(filepath.Join(other, "new"), filepath.Join(d, "conf", "sos.hcl")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, cw, "rename from another directory")
	os.Remove(filepath.Join(d, "conf", "sos.hcl"))
	time.Sleep(100 * time.Millisecond)
	writeOrFail(t, filepath.Join(d, "conf", "sos.hcl"), "three")
	waitChange(t, cw, "deleted and recreated")
}

// TestSlowWriterNotReadHalfWritten: a file rewritten in place by a slow
// writer (a copy over a slow link, a pipe), a few lines every settle/2.
// The first maxSettle (10 settles) cut the wait for writes to pause, and
// a prefix of the file was reported as the new content. Writes of the
// file itself always wait out the settle now. Found by review
// (helper-61).
func TestSlowWriterNotReadHalfWritten(t *testing.T) {
	d := t.TempDir()
	path := filepath.Join(d, "sos.hcl")
	writeOrFail(t, path, "old\n")
	settle := 50 * time.Millisecond
	cw := startWatcher(t, path, settle)
	seen := slowWrite(t, cw, path, settle)
	if len(seen) > 0 {
		t.Errorf("changes reported while the file was still being written: %v", seen)
	}
}

// TestGrandparentReplacedByRename: --config <d>/top/conf/sos.hcl; a
// deploy replaces <d>/top whole (mv top top.old; mv top.new top). The
// watch of top (the parent of the config's directory) reports top moved
// away, an event named <d>/top. The first parent filter dropped it (top
// is neither a chain directory nor the parent of one); a watched
// directory that went counts now. Found by review (helper-61).
func TestGrandparentReplacedByRename(t *testing.T) {
	d := t.TempDir()
	path := filepath.Join(d, "top", "conf", "sos.hcl")
	writeOrFail(t, path, "one")
	writeOrFail(t, filepath.Join(d, "top.new", "conf", "sos.hcl"), "two")
	cw := startWatcher(t, path, 50*time.Millisecond)
	if err := os.Rename(filepath.Join(d, "top"), filepath.Join(d, "top.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d, "top.new"), filepath.Join(d, "top")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	t.Logf("%s reads %q now", path, b)
	waitChange(t, cw, "the config's grandparent directory replaced by rename")
	writeOrFail(t, path, "three")
	waitChange(t, cw, "an edit after the grandparent was replaced")
}

// slowWrite rewrites path in place, one line every settle/2 for lines
// lines (beyond maxSettle), and returns what was reported meanwhile.
func slowWrite(t *testing.T, cw *ConfigWatcher, path string, settle time.Duration) []string {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seen []string
	lines := 60 // 60 × settle/2 = 1.5s, beyond maxSettle (1s)
	for i := range lines {
		f.WriteString(strings.Repeat("x", 10) + "\n")
		time.Sleep(settle / 2)
		select {
		case <-cw.C:
			b, _ := os.ReadFile(path)
			seen = append(seen, fmt.Sprintf("reported after line %d of %d: the file holds %d of %d bytes", i+1, lines, len(b), lines*11))
		default:
		}
	}
	return seen
}

// TestSlowWriterThroughSymlinkedDir: the slow writer of
// TestSlowWriterNotReadHalfWritten, with the config path through a
// symlinked directory (/etc/sosappliance -> /opt/sos/etc) or holding
// "..". The first files set held the path as given, while events are
// named after the resolved directory, so maxSettle cut the wait again.
// Found by review (helper-62).
func TestSlowWriterThroughSymlinkedDir(t *testing.T) {
	settle := 50 * time.Millisecond
	for _, shape := range []string{"linked dir", "dotdot after link"} {
		t.Run(strings.ReplaceAll(shape, " ", "_"), func(t *testing.T) {
			d := t.TempDir()
			real := filepath.Join(d, "real", "sos.hcl")
			writeOrFail(t, real, "old\n")
			var path string
			switch shape {
			case "linked dir":
				if err := os.Symlink(filepath.Join(d, "real"), filepath.Join(d, "link")); err != nil {
					t.Fatal(err)
				}
				path = filepath.Join(d, "link", "sos.hcl")
			default:
				if err := os.MkdirAll(filepath.Join(d, "real", "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(d, "real", "sub"), filepath.Join(d, "link")); err != nil {
					t.Fatal(err)
				}
				path = d + "/link/../sos.hcl"
			}
			cw := startWatcher(t, path, settle)
			t.Logf("files %v", cw.files)
			if seen := slowWrite(t, cw, real, settle); len(seen) > 0 {
				t.Errorf("%s: changes reported while the file was still being written: %v", path, seen)
			}
		})
	}
}

// TestRelativeLinkTargetUnderLinkedDir: a relative link target under a
// linked directory is read by the kernel from the link's real directory;
// the watcher joined it to the path as given and never watched the
// file's directory. Found by review (helper-62).
func TestRelativeLinkTargetUnderLinkedDir(t *testing.T) {
	d := t.TempDir()
	shared := filepath.Join(d, "opt", "sos", "share", "sos.hcl")
	writeOrFail(t, shared, "one")
	if err := os.MkdirAll(filepath.Join(d, "opt", "sos", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../share/sos.hcl", filepath.Join(d, "opt", "sos", "etc", "sos.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "opt", "sos", "etc"), filepath.Join(d, "etc", "sos")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, "etc", "sos", "sos.hcl")
	cw := startWatcher(t, path, 50*time.Millisecond)
	writeOrFail(t, shared, "two")
	b, _ := os.ReadFile(path)
	t.Logf("%s reads %q; watched: %v", path, b, watchedDirs(cw))
	waitChange(t, cw, "edit of the file a relative link under a linked directory names")
}

// TestLinkDirReachedThroughLink: a "current" link in a directory itself
// reached through a link (etc/sos -> opt/sos). The first watchLinksOn
// watched the link's directory by its unresolved name, and the swap was
// never seen. Found by review (helper-62).
func TestLinkDirReachedThroughLink(t *testing.T) {
	d := t.TempDir()
	writeOrFail(t, filepath.Join(d, "opt", "sos", "v1", "sos.hcl"), "one")
	writeOrFail(t, filepath.Join(d, "opt", "sos", "v2", "sos.hcl"), "two")
	if err := os.Symlink("v1", filepath.Join(d, "opt", "sos", "current")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "opt", "sos"), filepath.Join(d, "etc", "sos")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, "etc", "sos", "current", "sos.hcl")
	cw := startWatcher(t, path, 50*time.Millisecond)
	if err := os.Symlink("v2", filepath.Join(d, "opt", "sos", "current.new")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d, "opt", "sos", "current.new"), filepath.Join(d, "opt", "sos", "current")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	t.Logf("%s reads %q now; watched: %v", path, b, watchedDirs(cw))
	waitChange(t, cw, "the current link swapped, in a directory reached through a link")
}

// TestOddPathsTerminate: "/", a bare "sos.hcl", "./x/../sos.hcl" and
// loops of file or directory links: watchLinksOn ends, and an edit is
// seen where the path can be watched. Written by review (helper-62); it
// passed.
func TestOddPathsTerminate(t *testing.T) {
	d := t.TempDir()
	if err := os.Symlink("loop", filepath.Join(d, "loop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b", filepath.Join(d, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(d, "b")); err != nil {
		t.Fatal(err)
	}
	writeOrFail(t, filepath.Join(d, "x", "keep"), "")
	writeOrFail(t, filepath.Join(d, "sos.hcl"), "one")
	t.Chdir(d)
	for _, p := range []string{filepath.Join(d, "loop", "sos.hcl"), filepath.Join(d, "loop", "..", "sos.hcl"), filepath.Join(d, "a"), "/", "sos.hcl", "./x/../sos.hcl"} {
		cw, err := NewConfigWatcher(p, 50*time.Millisecond)
		if err != nil {
			t.Logf("%s: %v", p, err)
			continue
		}
		t.Logf("%s: watched %v", p, watchedDirs(cw))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cw.Run(ctx) }()
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Run did not stop", p)
		}
	}
	cw := startWatcher(t, "./x/../sos.hcl", 50*time.Millisecond)
	writeOrFail(t, filepath.Join(d, "sos.hcl"), "two")
	waitChange(t, cw, "edit of ./x/../sos.hcl")
}

// TestAliasWatchedFirst: fsnotify keeps the first name it is given for a
// directory and names its events so. The first watchLinksOn gave one an
// unresolved name (etc/sub for opt/sub) before watchDirs gave the
// resolved one, and an edit of the file at the end of the link chain was
// dropped as outside the chain. Every name given to fsnotify is resolved
// now. Found by review (helper-62).
func TestAliasWatchedFirst(t *testing.T) {
	d := t.TempDir()
	real := filepath.Join(d, "opt", "sub", "sos.hcl")
	writeOrFail(t, real, "one")
	if err := os.MkdirAll(filepath.Join(d, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "x"), filepath.Join(d, "opt", "sub", "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(d, "x", "sos.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "opt"), filepath.Join(d, "etc")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, "etc", "sub", "l", "sos.hcl")
	cw := startWatcher(t, path, 50*time.Millisecond)
	writeOrFail(t, real, "two")
	b, _ := os.ReadFile(path)
	t.Logf("%s reads %q; watched: %v", path, b, watchedDirs(cw))
	waitChange(t, cw, "edit of the file at the end of the link chain")
}
