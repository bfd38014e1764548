package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI=true, where a test that cannot
// run is a failure: CI must never pass by skipping the real thing.
func CI() bool { return os.Getenv("CI") == "true" }

// Require lets the test go on if ok; otherwise it skips the test, or fails
// it under CI=true. The format and args say what is missing.
func Require(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		cannotRun(t, fmt.Sprintf(format, args...))
	}
}

// RequireNoError is Require for a check that returns an error.
func RequireNoError(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		cannotRun(t, err.Error())
	}
}

// RequireBinaries requires every named program on PATH, and names all the
// missing ones at once.
func RequireBinaries(t testing.TB, names ...string) {
	t.Helper()
	if missing := MissingBinaries(names...); len(missing) > 0 {
		cannotRun(t, "needs "+strings.Join(missing, ", "))
	}
}

// RequireRoot requires root and every one of binaries on PATH, and names
// all that is missing at once.
func RequireRoot(t testing.TB, binaries ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	missing = append(missing, MissingBinaries(binaries...)...)
	if len(missing) > 0 {
		cannotRun(t, "needs "+strings.Join(missing, ", "))
	}
}

// MissingBinaries returns those of names that are not on PATH, for a test
// that reports them together with other prerequisites.
func MissingBinaries(names ...string) []string {
	var missing []string
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	return missing
}

// cannotRun is the one place that turns a missing prerequisite into a skip
// or, under CI=true, a failure, with the one message format.
func cannotRun(t testing.TB, what string) {
	t.Helper()
	if CI() {
		t.Fatalf("cannot run here: %s (a failure under CI=true)", what)
	} else {
		t.Skipf("cannot run here: %s", what)
	}
}
