package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateNodeReportsAProblemOnce: validate compiles every
// node the file names, then (9c7eb8a) the node of --node/--this-node
// again. When that node is one the file names and its compile fails (two
// tunings disagreeing), the same error is printed twice and counted as
// two problems.
// Found by review (helper-76) of 9c7eb8a.
func TestValidateNodeReportsAProblemOnce(t *testing.T) {
	src, err := os.ReadFile("../../examples/fasterdata.hcl")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sos.hcl")
	src = append(src, []byte("node \"both\" {\n  tuning = [\"dtn-100g\", \"dtn-10g\"]\n}\n")...)
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, plain := runCLI(t, "validate", "-c", path)
	code, _, withNode := runCLI(t, "validate", "-c", path, "--node", "both")
	t.Logf("validate: %s\nvalidate --node both (exit %d): %s", plain, code, withNode)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if n := strings.Count(withNode, "node both: error:"); n != 1 || !strings.Contains(withNode, "1 problem(s)") {
		t.Errorf("validate --node both reports node both's one problem %d times (%q); plain validate says %q",
			n, r76LastLine(withNode), r76LastLine(plain))
	}
}

func r76LastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}
