package store

// The first open of a state database on a full filesystem
// (removeUnfinished), made for real: a small tmpfs in a private mount
// namespace of a child test process.
//
// Found and written by review (helper-93).

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFirstOpenOnAFullDiskThroughASymlink: the state path is a symlink
// to where the database is to be (on another disk), not made yet. The
// first open on a full filesystem fails, as it must; bbolt created the
// symlink's target and left it empty. removeUnfinished looked at the
// path with Lstat, saw a symlink, and kept what it points to: once the
// room was back, every open refused the state database as damaged ("the
// file is empty (0 bytes)"). Now it removes the target.
func TestFirstOpenOnAFullDiskThroughASymlink(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	disk := testsupport.Tmpfs(t, "128k")
	target := filepath.Join(disk, "state.db")
	path := filepath.Join(t.TempDir(), "state.db")
	testsupport.RequireNoError(t, os.Symlink(target, path))
	free := testsupport.FillFS(t, disk, 0)
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("the first open on a full filesystem succeeded; the test did not make ENOSPC")
	} else {
		t.Logf("first open on the full filesystem: %v", err)
	}
	left := "nothing"
	if fi, err := os.Stat(target); err == nil {
		left = fmt.Sprint(fi.Size(), " bytes")
	}
	free()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("the first open on a full disk left %s at the symlink's target; open once the room is back: %v", left, err)
	}
	s.Close()
}

// TestFirstOpenOnAFullDiskWithRoom (held): the first open of a state
// database whose filesystem has 0 to 8 pages of room (bbolt's
// initialisation cut anywhere, or whole and the schema's first commit
// cut) fails or succeeds; either way, once the room is back, the next
// open succeeds and leaves a database that a further open accepts.
func TestFirstOpenOnAFullDiskWithRoom(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	for leave := 0; leave <= 8; leave++ {
		disk := testsupport.Tmpfs(t, "128k")
		path := filepath.Join(disk, "state.db")
		free := testsupport.FillFS(t, disk, leave)
		s, err := Open(path, Options{})
		size := int64(-1)
		if fi, serr := os.Stat(path); serr == nil {
			size = fi.Size()
		}
		t.Logf("%d pages of room: first open: %v; %d bytes left", leave, err, size)
		if err == nil {
			s.Close()
		}
		free()
		for i := range 2 {
			s, err := Open(path, Options{})
			if err != nil {
				t.Errorf("%d pages of room (left %d bytes): open %d once the room is back: %v", leave, size, i+1, err)
				break
			}
			s.Close()
		}
	}
}

// TestFirstOpenWhenItsDirectoryCannotBeMade (held): the state
// database's directory does not exist and its filesystem is read-only:
// the first open fails naming the directory, leaves nothing, and once
// the filesystem is writable the next open makes both.
func TestFirstOpenWhenItsDirectoryCannotBeMade(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	disk := testsupport.Tmpfs(t, "128k")
	path := filepath.Join(disk, "sosappliance", "state.db")
	if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("the first open on a read-only filesystem succeeded")
	} else {
		t.Logf("first open: %v", err)
	}
	if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT, ""); err != nil {
		t.Fatalf("remount read-write: %v", err)
	}
	if left, _ := os.ReadDir(disk); len(left) != 0 {
		t.Errorf("the failed first open left %d entries on the filesystem", len(left))
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open once the filesystem is writable: %v", err)
	}
	s.Close()
}
