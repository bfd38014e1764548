package appliance

import (
	"context"
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
