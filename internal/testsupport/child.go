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
// the name of one of its package's Children, or a namespace prefix and
// the name of the test to run inside fresh namespaces of those kinds.
const ChildEnv = "SOSAPPLIANCE_TEST_CHILD"

// The namespace prefixes: a fresh network namespace; a private mount
// namespace; both.
const (
	netnsPrefix       = "netns:"
	mountsPrefix      = "mounts:"
	mountsNetnsPrefix = "mounts+netns:"
)

// testInChild reports whether ChildEnv's value name is a test to run in
// fresh namespaces rather than one of the package's Children.
func testInChild(name string) bool {
	for _, p := range []string{netnsPrefix, mountsPrefix, mountsNetnsPrefix} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

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
	if !ok || testInChild(name) {
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
	return inFreshNamespaces(t, netnsPrefix, syscall.CLONE_NEWNET, "a fresh network namespace", binaries)
}

// InPrivateMounts is InFreshNetns with a mount namespace of the child's
// own instead, whose mounts never reach the host's (a small tmpfs to fill
// up, a filesystem to turn read-only), and the host's network.
func InPrivateMounts(t *testing.T, binaries ...string) bool {
	t.Helper()
	return inFreshNamespaces(t, mountsPrefix, syscall.CLONE_NEWNS, "a private mount namespace", append([]string{"mount"}, binaries...))
}

// InPrivateMountsAndNetns is InPrivateMounts in a fresh network namespace
// too.
func InPrivateMountsAndNetns(t *testing.T, binaries ...string) bool {
	t.Helper()
	return inFreshNamespaces(t, mountsNetnsPrefix, syscall.CLONE_NEWNS|syscall.CLONE_NEWNET,
		"a private mount namespace and a fresh network namespace", append([]string{"mount"}, binaries...))
}

func inFreshNamespaces(t *testing.T, prefix string, flags uintptr, what string, binaries []string) bool {
	t.Helper()
	if os.Getenv(ChildEnv) == prefix+t.Name() {
		if flags&syscall.CLONE_NEWNS != 0 {
			// The new namespace's mounts are copies that still
			// propagate to the host's: no longer.
			if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
				t.Fatalf("make the mounts private: %v", err)
			}
		}
		return true
	}
	RequireRoot(t, binaries...)
	cmd := exec.Command(executable(t), "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ChildEnv+"="+prefix+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	out, err := cmd.CombinedOutput()
	t.Logf("child in %s:\n%s", what, out)
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
