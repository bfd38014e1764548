package packaging

// Written by review (helper-76) of 9c7eb8a; the run --node drop-in and the
// downgrade failed before node_args. validate --this-node in the package
// scripts, mounted in lifecycle_test.go's throw-away chroot with
// scripts_test.go's service stubs.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// r76OldBinary builds sosappliance as it was before 9c7eb8a (no
// --this-node) from git archive, into a temp dir.
func r76OldBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sh := "git -C .. archive 9c7eb8a^ | tar -x -C " + dir + "/src"
	if err := os.Mkdir(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "sh", "-c", sh).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", sh, err, out)
	}
	bin := filepath.Join(dir, "sosappliance-old")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sosappliance")
	cmd.Dir = filepath.Join(dir, "src")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build old: %v\n%s", err, out)
	}
	return bin
}

func TestScriptsNode(t *testing.T) {
	deb := lifecycleDeb(t)

	// The unit's comment sends local changes to a drop-in, and the README
	// documents 'run --node NAME'. A host whose hostname is the
	// fully-qualified sos-agent.example.org runs its daemon as node
	// sos-agent through a drop-in ExecStart. The file is fine for that
	// daemon (plan --node sos-agent compiles it), yet postinst's valid
	// asks 'validate --this-node', i.e. the hostname, and the upgrade
	// never restarts the daemon onto the new binary, telling the operator
	// to fix a file that is not broken. Before 9c7eb8a it restarted.
	t.Run("UpgradeSkipsRestartOfADaemonRunWithNode", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
install_agent
hostname sos-agent.example.org
`+scriptsStubs+`
mkdir -p $R/etc/systemd/system/sosappliance.service.d
printf '[Service]\nExecStart=\nExecStart=/usr/bin/sosappliance run --node sos-agent -c /etc/sosappliance/sos.hcl\n' > $R/etc/systemd/system/sosappliance.service.d/node.conf
touch $R/root/active
chroot $R sosappliance plan --node sos-agent -c /etc/sosappliance/sos.hcl >/dev/null 2>&1 && echo "daemon node: compiles" || echo "daemon node: fails"
dpkg --root=$R --force-depends -i $R/root/p.deb >$R/root/dpkg.out 2>&1 && echo "upgrade: ok" || echo "upgrade: failed"
sed 's/^/dpkg| /' $R/root/dpkg.out
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log || true
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "daemon node: compiles") {
			t.Fatalf("scenario: the daemon's node does not compile:\n%s", out)
		}
		calls := out[strings.Index(out, "--- service calls:"):]
		if !strings.Contains(calls, "try-restart sosappliance.service") {
			t.Errorf("the daemon runs as --node sos-agent (drop-in) and the file gives sos-agent a role, but the upgrade did "+
				"not restart it onto the new version (validate --this-node took the hostname sos-agent.example.org); dpkg said: %q",
				r76Line(out, "does not validate"))
		}
	})

	// rpm runs the OLD package's %postun last, after the NEW package's
	// files are in place. On a downgrade (rpm -U --oldpackage to a build
	// before 9c7eb8a, the usual way back from a bad upgrade), this
	// %postun runs with the older binary, which has no --this-node:
	// validate exits 1 on the unknown flag, the restart is skipped, and
	// the operator is told the file does not validate for this node.
	t.Run("RPMPostunOnDowngradeToABinaryWithoutThisNode", func(t *testing.T) {
		old := r76OldBinary(t)
		postun, err := filepath.Abs("scripts/rpm/postun")
		if err != nil {
			t.Fatal(err)
		}
		out := lifecycleRun(t, deb, `
install_agent
`+scriptsStubs+`
cp `+postun+` $R/root/postun
cp `+old+` $R/usr/bin/sosappliance
touch $R/root/active
chroot $R sosappliance validate -c /etc/sosappliance/sos.hcl >/dev/null 2>&1 && echo "config: valid" || echo "config: invalid"
chroot $R sosappliance validate --this-node -c /etc/sosappliance/sos.hcl 2>&1 | head -1 | sed 's/^/old validate --this-node| /'
chroot $R sh /root/postun 1 2>&1 | sed 's/^/postun| /'
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log || true
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "config: valid") {
			t.Fatalf("scenario: the file does not validate with the old binary:\n%s", out)
		}
		calls := out[strings.Index(out, "--- service calls:"):]
		if !strings.Contains(calls, "try-restart sosappliance.service") {
			t.Errorf("%%postun 1 after a downgrade did not restart the daemon onto the older binary: %s; postun said %q",
				scriptsAfter(out, "old validate --this-node| "), r76Line(out, "postun| "))
		}
	})

}

// r76Line is the first line of out that contains s.
func r76Line(out, s string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return "(missing)"
}
