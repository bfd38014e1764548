package packaging

// Review (helper-68) of c4bae30: the maintainer scripts' rollback at
// removal, the purge that keeps a failed rollback's records, the daemon
// start after an undone removal; the snapshot versions with the time of
// day. Scenarios run in the throw-away chroot of lifecycle_test.go.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fixesStubs replaces systemctl, deb-systemd-invoke and
// deb-systemd-helper in the chroot by stubs that log their calls to
// /root/calls.log, with /run/systemd/system present as under systemd.
const fixesStubs = `
mkdir -p $R/run/systemd/system
for s in deb-systemd-invoke deb-systemd-helper systemctl; do
	rm -f $R/usr/bin/$s
	printf '#!/bin/sh\necho "%s $*" >> /root/calls.log\n' $s > $R/usr/bin/$s
	chmod 755 $R/usr/bin/$s
done
`

// fixesFakeDeb builds an arch-all package with the given control
// fields (after Package/Version) into dir.
func fixesFakeDeb(t *testing.T, dir, name, fields string) string {
	t.Helper()
	ctl := filepath.Join(dir, name, "DEBIAN")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ctl, "control"), []byte("Package: "+name+"\nVersion: 99\nArchitecture: all\n"+
		"Maintainer: review <review@example.invalid>\n"+fields+"Description: fixes fake package\n"), 0o644)
	out := filepath.Join(dir, name+".deb")
	run(t, "dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, name), out)
	return out
}

func TestDebLifecycle(t *testing.T) {
	deb := lifecycleDeb(t)

	// A daemon that the removal did not stop (no systemd in a container,
	// or a stop that failed: prerm ignores both) holds its lock, so the
	// rollback at removal refuses and prerm marks rollback-failed; purge
	// keeps state.db. Found by review (helper-68): the lock was a file
	// beside state.db, which purge deleted, and the rollback purge's
	// message asks for then ran under the running daemon, which applied
	// its file again. The lock is on state.db itself now.
	t.Run("PurgeKeepsWhatARunningDaemonHolds", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
install_agent
chroot $R sosappliance run -c /etc/sosappliance/sos.hcl >$R/root/run.log 2>&1 &
DPID=$!
trap 'kill $DPID 2>/dev/null || true' EXIT
for i in $(seq 1 150); do [ "$(cat /proc/sys/net/core/somaxconn)" = 8192 ] && break; sleep 0.2; done
for k in $(hoststate); do echo "running: $k"; done
dpkg --root=$R --force-depends --remove sosappliance 2>&1 | sed 's/^/remove| /'
dpkg --root=$R --force-depends --purge sosappliance 2>&1 | grep -v warning | sed 's/^/purge| /'
[ -e $R/var/lib/sosappliance/state.db ] && echo "purged: statedb=present" || echo "purged: statedb=absent"
install_agent
echo "reinstalled: daemon=$(kill -0 $DPID 2>/dev/null && echo alive || echo gone)"
if chroot $R sosappliance rollback --auto-approve -c /etc/sosappliance/sos.hcl >$R/root/rb.log 2>&1; then
	echo "reinstalled: rollback=done"
else
	echo "reinstalled: rollback=refused"
fi
sed 's/^/rollback| /' $R/root/rb.log | tail -4
kill -HUP $DPID 2>/dev/null || true
sleep 3
for k in $(hoststate); do echo "afterreload: $k"; done
kill $DPID 2>/dev/null || true
wait $DPID || true
`)
		t.Logf("%s", out)
		if lifecycleField(out, "running", "somaxconn") != "8192" {
			t.Fatalf("the daemon did not tune the namespace:\n%s", out)
		}
		if lifecycleField(out, "reinstalled", "daemon") != "alive" {
			t.Fatalf("the daemon is not running any more; the scenario needs it:\n%s", out)
		}
		if lifecycleField(out, "purged", "statedb") != "present" {
			t.Errorf("dpkg --purge deleted %s/state.db, which a running daemon holds and a failed rollback left records in", StateDir)
		}
		if lifecycleField(out, "reinstalled", "rollback") != "refused" {
			t.Errorf("after purge and reinstall, 'sosappliance rollback' rolled back under the daemon still running "+
				"(it refused before the purge); after the daemon's reload somaxconn=%s rule=%s: the rollback was undone",
				lifecycleField(out, "afterreload", "somaxconn"), lifecycleField(out, "afterreload", "rule"))
		}
	})

	// dpkg deconfigures sosappliance when a package it depends on
	// (nftables) is removed in favour of a conflicting one
	// (--auto-deconfigure, as apt does). prerm deconfigure stops the
	// running daemon and records /run/sosappliance.was-active, but only
	// abort-deconfigure reads the mark: when the removal succeeds and the
	// operator puts the dependency back, postinst configure merely
	// try-restarts a daemon that is not running, so an enabled node stays
	// stopped with the mark left in /run, and dpkg says nothing.
	t.Run("ReconfigureAfterDeconfigureLeavesDaemonStopped", func(t *testing.T) {
		dir := t.TempDir()
		nft := fixesFakeDeb(t, dir, "nftables", "")
		ipr := fixesFakeDeb(t, dir, "iproute2", "")
		cf := fixesFakeDeb(t, dir, "sos-fixes-nft-conflictor", "Conflicts: nftables\nReplaces: nftables\n")
		out := lifecycleRun(t, deb, `
cp `+nft+` `+ipr+` `+cf+` $R/root/
dpkg --root=$R -i $R/root/nftables.deb $R/root/iproute2.deb >/dev/null
dpkg --root=$R -i $R/root/p.deb >/dev/null
cp "$CFG" $R/etc/sosappliance/sos.hcl
`+fixesStubs+`
echo "operator: systemctl enable --now sosappliance.service" >> $R/root/calls.log
dpkg --root=$R --auto-deconfigure -i $R/root/sos-fixes-nft-conflictor.deb 2>&1 | sed 's/^/conflictor| /'
dpkg --root=$R -r sos-fixes-nft-conflictor >/dev/null
dpkg --root=$R -i $R/root/nftables.deb 2>&1 | sed 's/^/nftables| /'
dpkg --root=$R --configure --pending 2>&1 | sed 's/^/configure| /'
echo "status: $(dpkg --root=$R -s sosappliance | grep ^Status:)"
[ -e $R/run/sosappliance.was-active ] && echo "end: mark=present" || echo "end: mark=absent"
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "De-configuring sosappliance") || !strings.Contains(out, "Status: install ok installed") {
			t.Fatalf("dpkg did not deconfigure and configure sosappliance again:\n%s", out)
		}
		calls := out[strings.Index(out, "--- service calls:"):]
		lines := strings.Split(strings.TrimSpace(calls), "\n")
		var last string
		for _, l := range lines {
			if strings.Contains(l, "sosappliance.service") && !strings.Contains(l, "update-state") && !strings.Contains(l, "is-active") {
				last = l
			}
		}
		if strings.Contains(last, " stop ") || strings.Contains(last, "try-restart") {
			t.Errorf("sosappliance is configured again after a deconfigure that stopped its running daemon, but the "+
				"last thing done to its service was %q (the daemon stays stopped; was-active mark %s)",
				last, lifecycleField(out, "end", "mark"))
		}
	})

	// The operator deleted /etc/sosappliance/sos.hcl and the node never
	// ran the appliance (no state database anywhere). The rollback at
	// removal refuses to guess, and prerm then tells the operator that
	// "the host keeps what it could not put back, and the state database
	// keeps the records: reinstall sosappliance and run 'sosappliance
	// rollback'" and leaves the rollback-failed mark: there are no records
	// and nothing to put back; the advice sends them after a database that
	// does not exist.
	t.Run("RemoveWithoutConfigOrRecordsReportsAFailedRollback", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
dpkgr -i $R/root/p.deb
rm $R/etc/sosappliance/sos.hcl
dpkg --root=$R --force-depends --remove sosappliance 2>&1 | sed 's/^/remove| /'
[ -e $R/var/lib/sosappliance/state.db ] && echo "removed: statedb=present" || echo "removed: statedb=absent"
[ -e $R/var/lib/sosappliance/rollback-failed ] && echo "removed: mark=present" || echo "removed: mark=absent"
`)
		t.Logf("%s", out)
		if lifecycleField(out, "removed", "statedb") != "absent" {
			t.Fatalf("a state database exists; the scenario needs none:\n%s", out)
		}
		if strings.Contains(out, "the rollback failed") || lifecycleField(out, "removed", "mark") == "present" {
			t.Errorf("removing a package that never recorded anything reports a failed rollback and tells the operator "+
				"to reinstall and roll back a state database that does not exist (rollback-failed mark %s)",
				lifecycleField(out, "removed", "mark"))
		}
	})

	// Properties that held: with the example sos.hcl and nothing applied,
	// removal says there is nothing to roll back and does not mark a
	// failure; remove then purge leaves nothing; the rollback at removal
	// under dpkg runs without a terminal and without waiting for input.
	t.Run("RemoveWithExampleConfigRollsBackNothing", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
dpkgr -i $R/root/p.deb
dpkg --root=$R --force-depends --remove sosappliance </dev/null 2>&1 | sed 's/^/remove| /'
[ -e $R/var/lib/sosappliance/rollback-failed ] && echo "removed: mark=present" || echo "removed: mark=absent"
dpkgr --purge sosappliance
[ -e $R/var/lib/sosappliance ] && echo "purged: statedir=present" || echo "purged: statedir=absent"
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "nothing is recorded there to roll back") || strings.Contains(out, "rollback failed") {
			t.Errorf("removal with the example config did not say there is nothing to roll back:\n%s", out)
		}
		if lifecycleField(out, "removed", "mark") != "absent" || lifecycleField(out, "purged", "statedir") != "absent" {
			t.Errorf("remove/purge of a package that recorded nothing left state behind:\n%s", out)
		}
	})
}

// Snapshot builds of the day c4bae30 changed the version format sort by
// the hash's first characters: 0.0.0~git20261207.abc1234 (the old format,
// a commit at 00:30) and 0.0.0~git20261207.013000.def5678 (the new one, a
// commit at 01:30) compare "abc1234" against "013000": letters sort after
// a number's empty non-digit prefix in dpkg's order, so the later build
// is the lower version and apt never upgrades a node that installed a
// snapshot of that morning until the next day's builds.
func TestSnapshotVersionAcrossFormatChange(t *testing.T) {
	day := time.Date(2026, 12, 7, 0, 30, 0, 0, time.UTC)
	// What PackageVersion made before c4bae30 for a commit at 00:30.
	older := "0.0.0~git" + day.Format("20060102") + ".abc1234"
	newer, err := PackageVersion("def5678", day.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("dpkg", "--compare-versions", older+"-"+Revision, "lt", newer+"-"+Revision).Run(); err != nil {
		t.Errorf("the later snapshot %s sorts before %s, an earlier build of the same day in the format before c4bae30 "+
			"(dpkg --compare-versions: %v)", newer, older, err)
	}
}

// Property that held: snapshot versions sort by time across days and
// formats, and before/after tagged releases.
func TestSnapshotVersionsSort(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 7, h, 0, 0, 0, time.UTC) }
	v := func(describe string, when time.Time) string {
		t.Helper()
		s, err := PackageVersion(describe, when)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ordered := []string{
		"0.0.0~git20261206.fffffff", // old format, the day before
		v("fffffff", at(0)),
		v("0000000", at(1)),
		v("fffffff", at(23)),
		v("v0.1.0-rc1", at(23)),
		v("v0.1.0", at(23)),
		v("v0.1.0-1-gabc1234", at(23)),
		v("v0.1.0-2-g0000000", at(23)),
	}
	for i := 1; i < len(ordered); i++ {
		a, b := ordered[i-1]+"-"+Revision, ordered[i]+"-"+Revision
		if err := exec.Command("dpkg", "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("%s does not sort before %s", a, b)
		}
	}
}
