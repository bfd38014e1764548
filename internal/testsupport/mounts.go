package testsupport

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's size= option, e.g. "64k") on a
// new temp dir and unmounts it when the test ends. Call it only in a
// private mount namespace (InPrivateMounts).
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// FillFS writes a file in dir until its filesystem is full but for leave
// pages (of 4 KiB; with none left, to the last byte), and returns a func
// that removes the file again: the room is back.
func FillFS(t testing.TB, dir string, leave int) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "fill-the-filesystem")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	pages := 0
	for ; ; pages++ {
		if pages > 1<<20 {
			t.Fatalf("%s never filled up", dir)
		}
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	if leave > 0 {
		if err := f.Truncate(int64(pages-leave) * 4096); err != nil {
			t.Fatal(err)
		}
	} else {
		// Bytes, not pages: the last part of a page too.
		for range 4096 {
			if _, err := f.Write(chunk[:1]); err != nil {
				break
			}
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}
