package tuning

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// run runs a command and fails the test with its output on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// writeTree creates files under root from a path -> content map.
func writeTree(t *testing.T, root string, files map[string]string) {
	testsupport.WriteTree(t, root, files)
}

func readTree(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
