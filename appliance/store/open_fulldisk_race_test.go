package store

// Written by review (helper-98): processes racing first opens on a full
// disk, as TestProcessesRacingFirstOpens, asked what each was told.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRacingFirstOpensOnAFullDiskAreNotToldDamaged: six
// sosappliance processes (holdChild) race the first open of one
// database on a tmpfs with room for one, two or three of its four first
// pages. The one that makes the file fails (no space) and removes its
// unfinished file (removeUnfinished); the others, whose checkFile found
// that file, must not be told the database is damaged ("restore it from
// a backup"): it never recorded anything, and it is being removed.
// b745f4c looks again at an empty file; a short one (the first pages
// written, the disk full) is called damaged at once.
func TestRacingFirstOpensOnAFullDiskAreNotToldDamaged(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	disk := testsupport.Tmpfs(t, "128k")
	path := filepath.Join(disk, "state.db")
	var damaged []string
	said := map[string]int{}
	for round := range 120 {
		free := testsupport.FillFS(t, disk, 1+round%3)
		var holders []*openRaceHolder
		for range 6 {
			holders = append(holders, openRaceStartHolder(t, path))
		}
		for _, h := range holders {
			select {
			case <-h.ready:
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: holder %d neither opened nor failed", round, h.cmd.Process.Pid)
			}
		}
		for _, h := range holders {
			h.stop(t)
			s := strings.TrimSpace(h.stderr.String())
			if s == "" {
				continue
			}
			key := s
			if i := strings.Index(key, path); i >= 0 {
				key = key[i+len(path):]
			}
			if len(key) > 90 {
				key = key[:90]
			}
			said[key]++
			if strings.Contains(s, "damaged") {
				damaged = append(damaged, fmt.Sprintf("round %d (%d pages of room): %s", round, 1+round%3, s))
			}
		}
		free()
		if _, err := os.Stat(path); err == nil {
			testsupport.RequireNoError(t, os.Remove(path))
		}
	}
	for k, n := range said {
		t.Logf("%d x %q", n, k)
	}
	if len(damaged) > 0 {
		t.Fatalf("%d processes racing a first open on a full disk were told the database is damaged, e.g.\n%s", len(damaged), damaged[0])
	}
}

// TestDatabaseOnAnOverlayOpens (held): a database in an
// overlay's lower layer (a container image that carries one) is copied
// up when bbolt opens it to write, and may then have another inode
// number than the one checkFile checked: the open starts over once and
// goes on with the copy, its records whole; the lower layer's file is
// untouched. Layers on one filesystem and on two.
func TestDatabaseOnAnOverlayOpens(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	for _, twoFS := range []bool{false, true} {
		lowerFS := testsupport.Tmpfs(t, "4m")
		upperFS := lowerFS
		if twoFS {
			upperFS = testsupport.Tmpfs(t, "4m")
		}
		lower, upper, work, merged := filepath.Join(lowerFS, "lower"), filepath.Join(upperFS, "upper"), filepath.Join(upperFS, "work"), filepath.Join(t.TempDir(), "merged")
		for _, d := range []string{lower, upper, work, merged} {
			testsupport.RequireNoError(t, os.MkdirAll(d, 0o700))
		}
		statedbApplied(t, filepath.Join(lower, "state.db"))
		want, err := os.ReadFile(filepath.Join(lower, "state.db"))
		testsupport.RequireNoError(t, err)
		testsupport.RequireNoError(t, syscall.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work))
		t.Cleanup(func() { _ = syscall.Unmount(merged, syscall.MNT_DETACH) })
		path := filepath.Join(merged, "state.db")
		for i := range 3 {
			s, err := Open(path, Options{MustExist: true})
			if err != nil {
				t.Fatalf("layers on two filesystems %v, open %d: %v", twoFS, i, err)
			}
			records, err := s.Records()
			s.Close()
			if err != nil || len(records) != 1 {
				t.Fatalf("layers on two filesystems %v, open %d: records %v, %v", twoFS, i, records, err)
			}
		}
		got, err := os.ReadFile(filepath.Join(lower, "state.db"))
		testsupport.RequireNoError(t, err)
		if string(got) != string(want) {
			t.Fatalf("the lower layer's file was written")
		}
	}
}

// TestEmptyFileBindMountedWhileVerifyWaitsIsRefused (held): an
// empty file bind-mounted over the database while the open waits in
// verify for the daemon's lock is another file than the one checked:
// the open starts over, checks what the path names now and refuses it
// as empty; the empty file is not made a database.
func TestEmptyFileBindMountedWhileVerifyWaitsIsRefused(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	empty := filepath.Join(t.TempDir(), "empty")
	testsupport.RequireNoError(t, os.WriteFile(empty, nil, 0o600))
	got, _ := openRaceReplaceWhileVerifyWaits(t, Options{}, func(path string) {
		testsupport.RequireNoError(t, syscall.Mount(empty, path, "", syscall.MS_BIND, ""))
		t.Cleanup(func() { _ = syscall.Unmount(path, syscall.MNT_DETACH) })
	})
	if got.err == nil {
		t.Fatalf("the open succeeded (lineage %s) on the empty file bind-mounted over the database", got.s.Lineage())
	}
	t.Log(got.err)
	var corrupt *CorruptError
	if !errors.As(got.err, &corrupt) || !strings.Contains(got.err.Error(), "empty") {
		t.Fatalf("error %q does not say the file is empty", got.err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Fatalf("the bind-mounted empty file was written to: %v", err)
	}
}
