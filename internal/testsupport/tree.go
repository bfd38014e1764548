package testsupport

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteTree creates files under root from a path -> content map, with
// their directories: a host tree shaped like /proc and /sys for the
// executors that take a root.
func WriteTree(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
