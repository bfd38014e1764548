package testsupport

import (
	"os/exec"
	"testing"
)

// Commands runs each command (a name and its arguments) in turn and fails
// the test, with the command's output, at the first that fails: the setup
// of a test's own namespaces and links.
func Commands(t testing.TB, cmds ...[]string) {
	t.Helper()
	for _, args := range cmds {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
}
