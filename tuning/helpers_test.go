package tuning

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
)

// skipOrFail skips a test whose environment is missing, except in CI where
// a missing environment is a failure.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// requireRootAndTools checks for root and the named binaries.
func requireRootAndTools(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "needs %s: %v", tool, err)
		}
	}
}

// netnsEnv names the test a re-executed child runs inside its own network
// namespace.
const netnsEnv = "SOSAPPLIANCE_TUNING_TEST_NETNS"

// inFreshNetns runs the calling test again in a child process created in a
// new, empty network namespace, so every thread of it (and every tool it
// starts) sees only that namespace; the namespace and all it holds vanish
// when the child exits. It returns true in the child, where the test body
// runs, and false in the parent, which has already reported the child's
// outcome.
func inFreshNetns(t *testing.T, tools ...string) bool {
	t.Helper()
	if os.Getenv(netnsEnv) == t.Name() {
		return true
	}
	requireRootAndTools(t, tools...)
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsEnv+"="+t.Name())
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

func readTree(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
