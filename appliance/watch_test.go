package appliance

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// waitChange waits for one change notification; the generous bound only
// stops a broken watcher from hanging the test.
func waitChange(t *testing.T, cw *ConfigWatcher, what string) {
	t.Helper()
	select {
	case <-cw.C:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no change seen", what)
	}
}

func expectQuiet(t *testing.T, cw *ConfigWatcher, what string) {
	t.Helper()
	select {
	case <-cw.C:
		t.Fatalf("%s: change reported without new content", what)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestConfigWatcher(t *testing.T) {
	dir := t.TempDir()
	real1 := filepath.Join(dir, "releases", "1", "sos.hcl")
	real2 := filepath.Join(dir, "releases", "2", "sos.hcl")
	for i, p := range []string{real1, real2} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte{byte('a' + i)}, 0o644)
	}
	current := filepath.Join(dir, "current")
	if err := os.Symlink(filepath.Join(dir, "releases", "1"), current); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sos.hcl")
	if err := os.Symlink(filepath.Join(current, "sos.hcl"), path); err != nil {
		t.Fatal(err)
	}
	cw, err := NewConfigWatcher(path, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// In-place truncate and write through the symlink chain.
	f, err := os.OpenFile(real1, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("in-place")
	f.Close()
	waitChange(t, cw, "in-place write")

	// Rename-save of the target file, as vim and many editors do.
	tmp := real1 + ".swp"
	os.WriteFile(tmp, []byte("renamed"), 0o644)
	if err := os.Rename(tmp, real1); err != nil {
		t.Fatal(err)
	}
	waitChange(t, cw, "rename save")

	// Touch without new content: no reload.
	now := time.Now()
	os.Chtimes(real1, now, now)
	expectQuiet(t, cw, "touch")

	// Config management swaps the "current" symlink atomically.
	next := filepath.Join(dir, "current.new")
	os.Symlink(filepath.Join(dir, "releases", "2"), next)
	if err := os.Rename(next, current); err != nil {
		t.Fatal(err)
	}
	waitChange(t, cw, "symlink swap")

	// After the swap the new target directory is watched too.
	os.WriteFile(real2, []byte("edited release 2"), 0o644)
	waitChange(t, cw, "write to the new symlink target")
}
