package packaging

// The package's life on a node, in a throw-away chroot: install, apply,
// upgrade, remove, purge, an aborted removal. Written by review
// (helper-66); each test's comment tells the defect as found, before the
// maintainer scripts, the version and the changelog were fixed (the
// service calls' order held, and was kept; its removal now also asks
// whether the daemon ran).

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// lifecycleEnv runs a shell script inside a throw-away Debian "host": a
// chroot whose /usr and /etc are overlays over this machine's (so nothing
// the package writes reaches the real ones), with an empty dpkg database,
// in private mount, network and UTS namespaces (hostname sos-agent, a veth
// host0 with the agent address of testdata/container-agent.hcl). Mounts and
// links vanish with the namespaces when the script ends. $R is the chroot,
// $DEB the package, $CFG the agent configuration.
const lifecycleEnv = `set -e
W=$1; S=$2
R=$W/root
mkdir -p $R/usr $R/etc $W/uu $W/uw $W/eu $W/ew
mount --make-rprivate /
mount -t overlay overlay -o lowerdir=/usr,upperdir=$W/uu,workdir=$W/uw $R/usr
mount -t overlay overlay -o lowerdir=/etc,upperdir=$W/eu,workdir=$W/ew $R/etc
rm -rf $R/etc/sosappliance $R/etc/systemd/system/multi-user.target.wants/sosappliance.service
mkdir -p $R/var/lib/dpkg/info $R/var/lib/dpkg/updates $R/dev $R/proc $R/run $R/tmp $R/root
: > $R/var/lib/dpkg/status; : > $R/var/lib/dpkg/available
for l in bin sbin lib lib64; do [ -e $R/$l ] || ln -s usr/$l $R/$l; done
mount --rbind /dev $R/dev
mount -t proc proc $R/proc
mount -t tmpfs tmpfs $R/run
mount -t tmpfs tmpfs $R/tmp
hostname sos-agent
ip link set lo up
ip link add host0 type veth peer name h0peer
ip link set h0peer up
ip address add 10.203.1.2/24 dev host0
ip link set host0 up
mount -t sysfs sysfs /sys
mkdir -p $R/sys
mount -t sysfs sysfs $R/sys
export PATH=/usr/sbin:/usr/bin:/sbin:/bin R
cp "$DEB" $R/root/p.deb
dpkgr() { dpkg --root=$R --force-depends "$@" >/dev/null 2>&1 || { echo "dpkg $* failed"; dpkg --root=$R --force-depends "$@"; }; }
install_agent() { dpkgr -i $R/root/p.deb; cp "$CFG" $R/etc/sosappliance/sos.hcl; }
hoststate() {
	echo "somaxconn=$(cat /proc/sys/net/core/somaxconn)"
	echo "mtu_probing=$(cat /proc/sys/net/ipv4/tcp_mtu_probing)"
	echo "mtu=$(cat /sys/class/net/host0/mtu)"
	echo "rule=$(ip rule show | grep -c 'lookup 21327' || true)"
}
. $S
`

// lifecycleDeb is the host architecture's .deb of builtPackages: built
// once for the whole test binary (building it again for each test cost
// about 15 s of CPU apiece, xz being most of it).
func lifecycleDeb(t *testing.T) string {
	t.Helper()
	testsupport.RequireRoot(t, "go", "git", "dpkg", "unshare", "chroot", "ip", "mount")
	_, pkgs := builtPackages(t)
	for _, p := range pkgs {
		if p.format == "deb" && p.arch == runtime.GOARCH {
			return p.path
		}
	}
	t.Fatalf("no .deb is built for this machine's architecture %s", runtime.GOARCH)
	return ""
}

// lifecycleRun runs script under lifecycleEnv and returns its output.
func lifecycleRun(t *testing.T, deb, script string) string {
	t.Helper()
	dir := t.TempDir()
	env := filepath.Join(dir, "env.sh")
	body := filepath.Join(dir, "body.sh")
	writeFile(t, env, []byte(lifecycleEnv), 0o755)
	writeFile(t, body, []byte(script), 0o644)
	cfg, err := filepath.Abs("testdata/container-agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "w")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--net", "--uts", "sh", env, work, body)
	cmd.Env = append(os.Environ(), "DEB="+deb, "CFG="+cfg, "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scenario: %v\n%s", err, out)
	}
	return string(out)
}

// lifecycleField reads "label: key=value" lines.
func lifecycleField(out, label, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, label+": "+key+"="); ok {
			return rest
		}
	}
	return "(missing)"
}

// TestDebLifecycleHostState installs the .deb into a throw-away
// chroot in its own network namespace, lets `sosappliance apply` make the
// node an agent (sysctls, MTU, TPROXY steering, policy rule), then removes
// and purges the package the way an operator retiring the node would.
func TestDebLifecycleHostState(t *testing.T) {
	deb := lifecycleDeb(t)

	// dpkg --remove stops the daemon and takes away the binary, but leaves
	// the node tuned and steering whitelisted traffic to a relay port that
	// nothing will listen on again: the only tool that puts the recorded
	// values back (sosappliance rollback) went with the package.
	t.Run("RemoveLeavesHostTunedWithoutTheRollbackTool", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
for k in $(hoststate); do echo "before: $k"; done
install_agent
chroot $R sosappliance apply --auto-approve -c /etc/sosappliance/sos.hcl >/dev/null
for k in $(hoststate); do echo "applied: $k"; done
dpkgr --remove sosappliance
for k in $(hoststate); do echo "removed: $k"; done
[ -e $R/usr/bin/sosappliance ] && echo "removed: binary=present" || echo "removed: binary=absent"
`)
		t.Logf("%s", out)
		if lifecycleField(out, "applied", "rule") != "1" || lifecycleField(out, "applied", "somaxconn") != "8192" {
			t.Fatalf("apply did not tune the namespace:\n%s", out)
		}
		for _, k := range []string{"somaxconn", "mtu_probing", "mtu", "rule"} {
			if b, r := lifecycleField(out, "before", k), lifecycleField(out, "removed", k); b != r {
				t.Errorf("after dpkg --remove %s is %s, was %s before the package tuned the node; "+
					"the rollback tool (%s) is %s", k, r, b, BinaryPath, lifecycleField(out, "removed", "binary"))
			}
		}
	})

	// A rollback at removal that cannot put everything back (the
	// interface it tuned is away) leaves the records; purge then deleted
	// the state store with them, and the values the node had before the
	// appliance touched it were lost for good. Now purge keeps state.db
	// and says why, and a reinstall's rollback puts the rest back once
	// the interface is there again.
	t.Run("PurgeKeepsTheRecordsOfAFailedRollback", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
for k in $(hoststate); do echo "before: $k"; done
install_agent
chroot $R sosappliance apply --auto-approve -c /etc/sosappliance/sos.hcl >/dev/null
ip link del host0
dpkg --root=$R --force-depends --purge sosappliance 2>&1 | sed 's/^/purge| /'
[ -e $R/var/lib/sosappliance/state.db ] && echo "purged: statedb=present" || echo "purged: statedb=absent"
ip link add host0 type veth peer name h0peer
ip link set h0peer up
ip address add 10.203.1.2/24 dev host0
ip link set host0 mtu 9000 up
install_agent
echo "--- rollback after reinstall:"
chroot $R sosappliance rollback --auto-approve -c /etc/sosappliance/sos.hcl || echo "rollback exit $?"
for k in $(hoststate); do echo "rolledback: $k"; done
`)
		t.Logf("%s", out)
		if lifecycleField(out, "purged", "statedb") != "present" {
			t.Errorf("dpkg --purge deleted %s/state.db although the rollback at removal left records", StateDir)
		}
		if !strings.Contains(out, "purge keeps /var/lib/sosappliance/state.db") {
			t.Errorf("purge did not say why it kept state.db:\n%s", out)
		}
		for _, k := range []string{"somaxconn", "mtu_probing", "mtu", "rule"} {
			if b, r := lifecycleField(out, "before", k), lifecycleField(out, "rolledback", k); b != r {
				t.Errorf("after purge, reinstall and rollback %s is %s, was %s: the purge lost the rollback records", k, r, b)
			}
		}
	})
}

// TestSnapshotVersionsOfOneDay: before the first tag, git describe
// --always gives only the abbreviated hash, and PackageVersion makes
// 0.0.0~gitDATE.HASH. Two commits made the same day then sort by their
// hashes, which are random: here the later commit gets the lower version,
// so apt/dnf never upgrade to it (and would "downgrade" back).
func TestSnapshotVersionsOfOneDay(t *testing.T) {
	testsupport.RequireBinaries(t, "dpkg")
	day := time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC)
	older, err := PackageVersion("f00dbee", day)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := PackageVersion("0badc0d", day.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("dpkg", "--compare-versions", older+"-"+Revision, "lt", newer+"-"+Revision).CombinedOutput()
	if err != nil {
		t.Errorf("the later snapshot %s sorts before the earlier %s of the same day (dpkg --compare-versions: %v %s)",
			newer, older, err, strings.TrimSpace(string(out)))
	}
}

// TestTaggedBuildWithUnreleasedHeading: Keep a Changelog (which
// CHANGELOG.md follows) keeps an "## [Unreleased]" heading on top, empty
// right after a release. Building the release tag itself then gives
// changelog.Debian two entries of the same version, the first one a
// "Snapshot build" note: the Unreleased case wins before the "tagged
// build" case is looked at.
func TestTaggedBuildWithUnreleasedHeading(t *testing.T) {
	built := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	md := "# Changelog\n\n## [Unreleased]\n\n## [1.0.0] - 2025-01-02\n\n### Added\n\n- First.\n"
	releases, err := ParseChangelog(md)
	if err != nil {
		t.Fatal(err)
	}
	got := DebianChangelog(PackageName, "1.0.0", Revision, DefaultMaintainer, built, releases)
	checkWithDpkg(t, got, []string{"1.0.0-1"})
	if strings.Contains(got, "Snapshot build") {
		t.Errorf("the changelog of the tagged release calls it a snapshot:\n%s", got)
	}
}

// TestAbortRemoveLeavesDaemonStopped: when the removal of
// sosappliance in favour of a conflicting package is unwound (that
// package's preinst fails), dpkg puts sosappliance back to "installed"
// and calls its postinst abort-remove. prerm remove had already stopped
// the running daemon; postinst abort-remove does nothing, so the node is
// left installed, enabled, and not running, and dpkg reports nothing
// about it. systemctl and deb-systemd-invoke are stubs in the chroot that
// log their calls (with /run/systemd/system present, as under systemd).
func TestAbortRemoveLeavesDaemonStopped(t *testing.T) {
	deb := lifecycleDeb(t)
	dir := t.TempDir()
	ctl := filepath.Join(dir, "cf", "DEBIAN")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ctl, "control"), []byte("Package: sos-lifecycle-conflictor\nVersion: 1\nArchitecture: all\n"+
		"Maintainer: review <review@example.invalid>\nConflicts: sosappliance\nReplaces: sosappliance\n"+
		"Description: conflicts with sosappliance; its preinst fails\n"), 0o644)
	writeFile(t, filepath.Join(ctl, "preinst"), []byte("#!/bin/sh\necho \"preinst $*: failing\" >&2\nexit 1\n"), 0o755)
	conflictor := filepath.Join(dir, "conflictor.deb")
	run(t, "dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, "cf"), conflictor)

	out := lifecycleRun(t, deb, `
install_agent
mkdir -p $R/run/systemd/system
for s in deb-systemd-invoke systemctl; do
	rm -f $R/usr/bin/$s
	printf '#!/bin/sh\necho "%s $*" >> /root/calls.log\n' $s > $R/usr/bin/$s
	chmod 755 $R/usr/bin/$s
done
echo "operator: systemctl enable --now sosappliance.service" >> $R/root/calls.log
cp "`+conflictor+`" $R/root/cf.deb
dpkg --root=$R -i $R/root/cf.deb || echo "dpkg -i conflictor: exit $?"
echo "status: $(dpkg --root=$R -s sosappliance | grep ^Status:)"
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
	t.Logf("%s", out)
	if !strings.Contains(out, "Status: install ok installed") {
		t.Fatalf("dpkg did not put sosappliance back:\n%s", out)
	}
	calls := out[strings.Index(out, "--- service calls:"):]
	lines := strings.Split(strings.TrimSpace(calls), "\n")
	last := lines[len(lines)-1]
	if strings.Contains(last, " stop ") {
		t.Errorf("the removal was undone and sosappliance is installed again, but the last thing done to its service was %q: "+
			"postinst abort-remove does not start the daemon prerm stopped", last)
	}
}

// TestServiceCallsThroughTheLifecycle (a property that held): with
// systemd stubbed, a reinstall (dpkg's upgrade path) never stops the
// daemon in prerm and try-restarts it in postinst after a daemon-reload;
// remove stops it; purge drops the enablement state; the first install
// starts and enables nothing.
func TestServiceCallsThroughTheLifecycle(t *testing.T) {
	deb := lifecycleDeb(t)
	out := lifecycleRun(t, deb, `
mkdir -p $R/run/systemd/system
for s in deb-systemd-invoke deb-systemd-helper systemctl; do
	rm -f $R/usr/bin/$s
	printf '#!/bin/sh\necho "%s $*" >> /root/calls.log\n' $s > $R/usr/bin/$s
	chmod 755 $R/usr/bin/$s
done
log() { echo "== $*" >> $R/root/calls.log; }
log install; install_agent
log reinstall; dpkgr -i $R/root/p.deb
log remove; dpkgr -r sosappliance
log purge; dpkgr -P sosappliance
echo "--- calls:"; cat $R/root/calls.log
`)
	calls := out[strings.Index(out, "--- calls:")+len("--- calls:\n"):]
	want := `== install
deb-systemd-helper update-state sosappliance.service
systemctl --system daemon-reload
== reinstall
deb-systemd-helper update-state sosappliance.service
systemctl --system daemon-reload
systemctl show -p ExecStart --value sosappliance.service
deb-systemd-invoke try-restart sosappliance.service
== remove
systemctl is-active --quiet sosappliance.service
deb-systemd-invoke stop sosappliance.service
systemctl --system daemon-reload
== purge
deb-systemd-helper purge sosappliance.service
systemctl --system daemon-reload
`
	if calls != want {
		t.Errorf("service calls:\n%s\nwant:\n%s", calls, want)
	}
}

// TestUpgradeRestartsIntoABrokenConfig: the daemon keeps running
// its last good configuration when the operator saves a broken sos.hcl
// (a reload that fails changes nothing). A package upgrade (here a
// reinstall, which runs the same scripts; unattended-upgrades does it
// unasked) try-restarts the daemon without checking the file first: the
// new process reads the broken file, exits 1 at start and Restart=
// loops on it, so a routine upgrade takes down a node that was carrying
// traffic. dpkg reports success.
func TestUpgradeRestartsIntoABrokenConfig(t *testing.T) {
	deb := lifecycleDeb(t)
	out := lifecycleRun(t, deb, `
install_agent
mkdir -p $R/run/systemd/system
for s in deb-systemd-invoke systemctl; do
	rm -f $R/usr/bin/$s
	printf '#!/bin/sh\necho "%s $*" >> /root/calls.log\n' $s > $R/usr/bin/$s
	chmod 755 $R/usr/bin/$s
done
echo "operator: systemctl enable --now sosappliance.service" >> $R/root/calls.log
printf '\nwhitelist "half-typed" {\n' >> $R/etc/sosappliance/sos.hcl
if chroot $R sosappliance validate -c /etc/sosappliance/sos.hcl >/dev/null 2>&1; then echo "config: valid"; else echo "config: invalid"; fi
dpkg --root=$R --force-depends -i $R/root/p.deb >$R/root/dpkg.out 2>&1 && echo "upgrade: ok" || echo "upgrade: failed"
sed 's/^/dpkg| /' $R/root/dpkg.out
timeout 30 chroot $R sosappliance run -c /etc/sosappliance/sos.hcl >/dev/null 2>&1 && echo "restarted daemon: exit 0" || echo "restarted daemon: exit $?"
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
	t.Logf("%s", out)
	if !strings.Contains(out, "config: invalid") {
		t.Fatalf("the edited file is not invalid:\n%s", out)
	}
	calls := out[strings.Index(out, "--- service calls:"):]
	if strings.Contains(calls, "try-restart sosappliance.service") && strings.Contains(out, "upgrade: ok") &&
		!strings.Contains(strings.ToLower(out), "not restart") {
		t.Errorf("postinst try-restarted the running daemon onto a sos.hcl that does not validate (the new process: %s), "+
			"and dpkg reports success: the node goes down on a routine upgrade", strings.TrimSpace(strings.TrimPrefix(out[strings.Index(out, "restarted daemon:"):strings.Index(out, "--- service calls:")], "restarted daemon:")))
	}
}
