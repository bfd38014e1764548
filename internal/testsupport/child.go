package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// ChildEnv tells a test binary started again by this package what to be:
// the name of one of its package's Children, or netnsPrefix and the name of
// the test to run inside a fresh network namespace.
const ChildEnv = "SOSAPPLIANCE_TEST_CHILD"

const netnsPrefix = "netns:"

// Children are the roles a package's test binary can be started in instead
// of running its tests: a stand-in for another process (a daemon, a second
// database holder, a command's main). Each gets the command-line arguments
// Command was given and returns the process's exit code.
type Children map[string]func(args []string) int

// Main is a whole TestMain: started as one of children, the process runs it
// and exits; otherwise it runs the tests.
func Main(m *testing.M, children Children) {
	RunChild(children)
	os.Exit(m.Run())
}

// RunChild runs one of children and exits if Command started this process
// as it, and otherwise returns: for a TestMain that runs its tests another
// way than m.Run.
func RunChild(children Children) {
	name, ok := os.LookupEnv(ChildEnv)
	if !ok || strings.HasPrefix(name, netnsPrefix) {
		return
	}
	run, ok := children[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testsupport: this test binary has no child %q\n", name)
		os.Exit(2)
	}
	// The child's own children are not test binaries of this package.
	os.Unsetenv(ChildEnv)
	os.Exit(run(os.Args[1:]))
}

// Command returns a command that runs this test binary as the child name
// with args; the package's TestMain must call Main or RunChild with it.
func Command(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(executable(t), args...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+name)
	return cmd
}

// CommandInNetns is Command run through `ip netns exec ns`: inside the named
// network namespace, with /sys and /etc/netns/ns mounted as ip sets them up.
func CommandInNetns(t testing.TB, ns, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, executable(t)}, args...)...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+name)
	return cmd
}

// InFreshNetns runs the calling test again in a child process created in a
// new, empty network namespace, so every thread of it (and every program it
// starts) sees only that namespace; the namespace and all it holds vanish
// when the child exits. It returns true in the child, where the test body
// runs, and false in the parent, which has required root and binaries and
// already reported the child's outcome.
func InFreshNetns(t *testing.T, binaries ...string) bool {
	t.Helper()
	if os.Getenv(ChildEnv) == netnsPrefix+t.Name() {
		return true
	}
	RequireRoot(t, binaries...)
	cmd := exec.Command(executable(t), "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ChildEnv+"="+netnsPrefix+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	t.Logf("child in a fresh network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !regexp.MustCompile(`(?m)^--- PASS: ` + regexp.QuoteMeta(t.Name())).Match(out) {
		t.Fatal("child did not run the test")
	}
	return false
}

func executable(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	return self
}
