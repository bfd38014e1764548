package packaging

// The maintainer scripts' rollback at removal, start_again and the
// restart on upgrade, in the throw-away chroot of lifecycle_test.go, with
// systemctl stubs that keep the unit's state. Written by review (helper-72)
// of c4bae30 and 65641f0: the two silent skips of start_again and the
// restarts onto a file without this node failed before validate
// --this-node and start_again's message; the other subtests passed.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scriptsStubs replaces systemctl and deb-systemd-invoke/-helper by
// stubs that log their calls to /root/calls.log and keep the service's
// state in /root/active, so that is-active answers as a service manager
// would (the stubs of lifecycle_more_test.go always say "active").
const scriptsStubs = `
mkdir -p $R/run/systemd/system
cat > $R/usr/bin/systemctl <<'EOS'
#!/bin/sh
echo "systemctl $*" >> /root/calls.log
case "$*" in
*is-active*) [ -e /root/active ] ;;
show*ExecStart*)
	# What systemd shows: the last ExecStart of the drop-ins, or the unit's.
	line=$(grep -h '^ExecStart=.' /etc/systemd/system/sosappliance.service.d/*.conf 2>/dev/null | tail -n 1)
	[ -n "$line" ] || line="ExecStart=/usr/bin/sosappliance run -c /etc/sosappliance/sos.hcl"
	echo "{ path=/usr/bin/sosappliance ; argv[]=${line#ExecStart=} ; ignore_errors=no }" ;;
esac
EOS
cat > $R/usr/bin/deb-systemd-invoke <<'EOS'
#!/bin/sh
echo "deb-systemd-invoke $*" >> /root/calls.log
case "$1" in
start | restart) touch /root/active ;;
stop) rm -f /root/active ;;
esac
EOS
cat > $R/usr/bin/deb-systemd-helper <<'EOS'
#!/bin/sh
echo "deb-systemd-helper $*" >> /root/calls.log
EOS
chmod 755 $R/usr/bin/systemctl $R/usr/bin/deb-systemd-invoke $R/usr/bin/deb-systemd-helper
`

// scriptsFailingConflictor builds a package that conflicts with
// sosappliance and whose preinst fails: dpkg removes sosappliance for it
// (prerm remove in-favour), then undoes that (postinst abort-remove).
func scriptsFailingConflictor(t *testing.T, dir string) string {
	t.Helper()
	ctl := filepath.Join(dir, "cf", "DEBIAN")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ctl, "control"), []byte("Package: sos-r72-conflictor\nVersion: 1\nArchitecture: all\n"+
		"Maintainer: review <review@example.invalid>\nConflicts: sosappliance\nReplaces: sosappliance\n"+
		"Description: conflicts with sosappliance; its preinst fails\n"), 0o644)
	writeFile(t, filepath.Join(ctl, "preinst"), []byte("#!/bin/sh\necho \"preinst $*: failing\" >&2\nexit 1\n"), 0o755)
	out := filepath.Join(dir, "cf.deb")
	run(t, "dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, "cf"), out)
	return out
}

func TestDebScripts(t *testing.T) {
	deb := lifecycleDeb(t)
	dir := t.TempDir()
	failing := scriptsFailingConflictor(t, dir)

	// The daemon runs its last good configuration while the operator's
	// sos.hcl does not validate (a reload that fails changes nothing).
	// A conflicting package's install removes sosappliance and fails:
	// prerm remove stopped the daemon and rolled the host back; dpkg puts
	// sosappliance back and calls postinst abort-remove, whose start_again
	// skips the start because the file does not validate, and says
	// nothing. The node is left installed, enabled, untuned and without
	// its daemon, and the only output is dpkg's error about the other
	// package.
	t.Run("AbortRemoveOntoABrokenFileIsSilent", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
install_agent
chroot $R sosappliance apply --auto-approve -c /etc/sosappliance/sos.hcl >/dev/null
for k in $(hoststate); do echo "applied: $k"; done
`+scriptsStubs+`
touch $R/root/active
echo "operator: systemctl enable --now" >> $R/root/calls.log
printf '\nwhitelist "half-typed" {\n' >> $R/etc/sosappliance/sos.hcl
cp `+failing+` $R/root/cf.deb
dpkg --root=$R -i $R/root/cf.deb 2>&1 | sed 's/^/conflictor| /'
echo "status: $(dpkg --root=$R -s sosappliance | grep ^Status:)"
for k in $(hoststate); do echo "end: $k"; done
[ -e $R/root/active ] && echo "end: daemon=active" || echo "end: daemon=stopped"
[ -e $R/run/sosappliance.was-active ] && echo "end: mark=present" || echo "end: mark=absent"
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "Status: install ok installed") || lifecycleField(out, "applied", "somaxconn") != "8192" {
			t.Fatalf("scenario did not run as intended:\n%s", out)
		}
		dpkgOut := out[:strings.Index(out, "--- service calls:")]
		if lifecycleField(out, "end", "daemon") == "stopped" && !strings.Contains(dpkgOut, "not start") &&
			!strings.Contains(dpkgOut, "not started") && !strings.Contains(dpkgOut, "systemctl start") {
			t.Errorf("the removal was undone and sosappliance is installed again, but the daemon prerm stopped stays stopped "+
				"(was-active mark %s, host somaxconn %s -> %s) and nothing says so: start_again skipped the start because "+
				"sos.hcl does not validate, silently",
				lifecycleField(out, "end", "mark"), lifecycleField(out, "applied", "somaxconn"), lifecycleField(out, "end", "somaxconn"))
		}
	})

	// The same after a deconfigure (a dependency replaced by a conflicting
	// package, then put back): postinst configure's start_again skips the
	// start onto the broken file, and the upgrade-branch message is not
	// printed either, because the daemon is not active any more.
	t.Run("ConfigureAfterDeconfigureOntoABrokenFileIsSilent", func(t *testing.T) {
		d := t.TempDir()
		nft := fixesFakeDeb(t, d, "nftables", "")
		ipr := fixesFakeDeb(t, d, "iproute2", "")
		cf := fixesFakeDeb(t, d, "sos-r72-nft-conflictor", "Conflicts: nftables\nReplaces: nftables\n")
		out := lifecycleRun(t, deb, `
cp `+nft+` `+ipr+` `+cf+` $R/root/
dpkg --root=$R -i $R/root/nftables.deb $R/root/iproute2.deb >/dev/null
dpkg --root=$R -i $R/root/p.deb >/dev/null
cp "$CFG" $R/etc/sosappliance/sos.hcl
`+scriptsStubs+`
touch $R/root/active
echo "operator: systemctl enable --now" >> $R/root/calls.log
printf '\nwhitelist "half-typed" {\n' >> $R/etc/sosappliance/sos.hcl
dpkg --root=$R --auto-deconfigure -i $R/root/sos-r72-nft-conflictor.deb 2>&1 | sed 's/^/conflictor| /'
dpkg --root=$R -r sos-r72-nft-conflictor >/dev/null
dpkg --root=$R -i $R/root/nftables.deb 2>&1 | sed 's/^/nftables| /'
dpkg --root=$R --configure --pending 2>&1 | sed 's/^/configure| /'
echo "status: $(dpkg --root=$R -s sosappliance | grep ^Status:)"
[ -e $R/root/active ] && echo "end: daemon=active" || echo "end: daemon=stopped"
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "De-configuring sosappliance") || !strings.Contains(out, "Status: install ok installed") {
			t.Fatalf("dpkg did not deconfigure and configure sosappliance again:\n%s", out)
		}
		dpkgOut := out[:strings.Index(out, "--- service calls:")]
		if lifecycleField(out, "end", "daemon") == "stopped" && !strings.Contains(dpkgOut, "does not validate") &&
			!strings.Contains(dpkgOut, "not start") {
			t.Errorf("sosappliance is configured again after a deconfigure stopped its running daemon; the daemon stays " +
				"stopped because sos.hcl does not validate, and neither postinst nor dpkg says so")
		}
	})

	// postinst restarts on upgrade "only onto a configuration that
	// loads", checked with 'sosappliance validate'. validate checks the
	// file and compiles every node it names, but not that this node is
	// one of them; 'sosappliance run' refuses a node with no role. The
	// operator's edit renamed this node's agent (a typo, or the host is to
	// be renamed): the running daemon keeps its last good configuration;
	// an upgrade (a reinstall here, as unattended-upgrades does unasked)
	// validates the file, try-restarts the daemon, and the new process
	// exits at start (Restart= loops on it): the node goes down on a
	// routine upgrade and dpkg says nothing. The same check guards
	// start_again and rpm %postun. A reinstall with --force-confmiss
	// (the file deleted) restarts the same way onto the shipped example,
	// which names no node of this host.
	t.Run("UpgradeRestartsOntoAFileWithoutThisNode", func(t *testing.T) {
		out := lifecycleRun(t, deb, `
install_agent
`+scriptsStubs+`
touch $R/root/active
echo "operator: systemctl enable --now" >> $R/root/calls.log
sed -i 's/"sos-agent"/"sos-agent-renamed"/' $R/etc/sosappliance/sos.hcl
chroot $R sosappliance validate -c /etc/sosappliance/sos.hcl >/dev/null 2>&1 && echo "config: valid" || echo "config: invalid"
dpkg --root=$R --force-depends -i $R/root/p.deb >$R/root/dpkg.out 2>&1 && echo "upgrade: ok" || echo "upgrade: failed"
sed 's/^/dpkg| /' $R/root/dpkg.out
timeout 30 chroot $R sosappliance run -c /etc/sosappliance/sos.hcl >$R/root/run.out 2>&1 && echo "restarted daemon: exit 0" || echo "restarted daemon: exit $?"
sed 's/^/run| /' $R/root/run.out | tail -3
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
		t.Logf("%s", out)
		if !strings.Contains(out, "config: valid") {
			t.Fatalf("the edited file does not validate; the scenario needs one that does:\n%s", out)
		}
		calls := out[strings.Index(out, "--- service calls:"):]
		if strings.Contains(calls, "try-restart sosappliance.service") && !strings.Contains(out, "restarted daemon: exit 0") &&
			!strings.Contains(strings.ToLower(out), "not restart") {
			t.Errorf("postinst try-restarted the running daemon onto a sos.hcl that validates but gives this node no role "+
				"(the new process: exit %s), and dpkg reports the upgrade %s without a word: the node goes down on a routine upgrade",
				scriptsAfter(out, "restarted daemon: exit "), scriptsAfter(out, "upgrade: "))
		}
	})

	// The same guard in rpm %postun ($1 = 1 after an upgrade), run here
	// as rpm runs it.
	t.Run("RPMPostunRestartsOntoAFileWithoutThisNode", func(t *testing.T) {
		postun, err := filepath.Abs("scripts/rpm/postun")
		if err != nil {
			t.Fatal(err)
		}
		out := lifecycleRun(t, deb, `
install_agent
`+scriptsStubs+`
cp `+postun+` $R/root/postun
touch $R/root/active
sed -i 's/"sos-agent"/"sos-agent-renamed"/' $R/etc/sosappliance/sos.hcl
chroot $R sh /root/postun 1 2>&1 | sed 's/^/postun| /'
timeout 30 chroot $R sosappliance run -c /etc/sosappliance/sos.hcl >/dev/null 2>&1 && echo "restarted daemon: exit 0" || echo "restarted daemon: exit $?"
echo "--- service calls:"
grep -v daemon-reload $R/root/calls.log
`)
		t.Logf("%s", out)
		calls := out[strings.Index(out, "--- service calls:"):]
		if strings.Contains(calls, "try-restart sosappliance.service") && !strings.Contains(out, "restarted daemon: exit 0") &&
			!strings.Contains(strings.ToLower(out), "not restart") {
			t.Errorf("%%postun 1 try-restarted the running daemon onto a sos.hcl that validates but gives this node no role "+
				"(the new process: exit %s), silently", scriptsAfter(out, "restarted daemon: exit "))
		}
	})

	// Property: a was-active mark left by prerm deconfigure does not
	// outlive the package: remove, purge and a fresh install the same
	// boot start nothing (prerm remove rewrites the mark from is-active,
	// postrm remove deletes it).
	t.Run("MarkOfADeconfigureDoesNotReachAFreshInstall", func(t *testing.T) {
		d := t.TempDir()
		nft := fixesFakeDeb(t, d, "nftables", "")
		ipr := fixesFakeDeb(t, d, "iproute2", "")
		cf := fixesFakeDeb(t, d, "sos-r72-nft-conflictor", "Conflicts: nftables\nReplaces: nftables\n")
		out := lifecycleRun(t, deb, `
cp `+nft+` `+ipr+` `+cf+` $R/root/
dpkg --root=$R -i $R/root/nftables.deb $R/root/iproute2.deb >/dev/null
dpkg --root=$R -i $R/root/p.deb >/dev/null
cp "$CFG" $R/etc/sosappliance/sos.hcl
`+scriptsStubs+`
touch $R/root/active
dpkg --root=$R --auto-deconfigure -i $R/root/sos-r72-nft-conflictor.deb >/dev/null 2>&1 || true
[ -e $R/run/sosappliance.was-active ] && echo "deconfigured: mark=present" || echo "deconfigured: mark=absent"
dpkg --root=$R --force-depends --purge sosappliance 2>&1 | sed 's/^/purge| /'
[ -e $R/run/sosappliance.was-active ] && echo "purged: mark=present" || echo "purged: mark=absent"
echo "== fresh install" >> $R/root/calls.log
dpkg --root=$R --force-depends -i $R/root/p.deb >/dev/null 2>&1
cp "$CFG" $R/etc/sosappliance/sos.hcl
dpkg --root=$R --force-depends -i $R/root/p.deb >/dev/null 2>&1
echo "--- service calls:"
sed -n '/== fresh install/,$p' $R/root/calls.log | grep -v daemon-reload
`)
		t.Logf("%s", out)
		if lifecycleField(out, "deconfigured", "mark") != "present" {
			t.Fatalf("deconfigure left no mark:\n%s", out)
		}
		calls := out[strings.Index(out, "--- service calls:"):]
		if strings.Contains(calls, " start sosappliance") {
			t.Errorf("a fresh install after a deconfigure and a purge started the service:\n%s", calls)
		}
	})

	// Property: rpm %preun rolls the host back on erase ($1 = 0) only:
	// during an upgrade or the erase of one of two installed versions
	// ($1 = 1) the host keeps its tuning.
	t.Run("RPMPreunRollsBackOnlyOnErase", func(t *testing.T) {
		preun, err := filepath.Abs("scripts/rpm/preun")
		if err != nil {
			t.Fatal(err)
		}
		out := lifecycleRun(t, deb, `
install_agent
cp `+preun+` $R/root/preun
chroot $R sosappliance apply --auto-approve -c /etc/sosappliance/sos.hcl >/dev/null
chroot $R sh /root/preun 1 2>&1 | sed 's/^/preun1| /'
for k in $(hoststate); do echo "upgrade: $k"; done
chroot $R sh /root/preun 0 2>&1 | sed 's/^/preun0| /'
echo "erase: exit=$?"
for k in $(hoststate); do echo "erase: $k"; done
`)
		t.Logf("%s", out)
		if lifecycleField(out, "upgrade", "somaxconn") != "8192" || lifecycleField(out, "upgrade", "rule") != "1" {
			t.Errorf("%%preun 1 (upgrade) rolled the host back:\n%s", out)
		}
		if lifecycleField(out, "erase", "somaxconn") == "8192" || lifecycleField(out, "erase", "rule") != "0" {
			t.Errorf("%%preun 0 (erase) did not roll the host back:\n%s", out)
		}
	})

	// Property: lintian finds no error in the package with the new
	// scripts (it warns command-with-path-in-maintainer-script for
	// /usr/bin/sosappliance in prerm and postinst, which is deliberate:
	// the package's own binary, not one found on PATH).
	t.Run("Lintian", func(t *testing.T) {
		out, err := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
		t.Logf("lintian (%v):\n%s", err, out)
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "E: ") {
				t.Errorf("lintian: %s", line)
			}
		}
	})
}

// scriptsAfter is the rest of the first line of out that starts with
// prefix.
func scriptsAfter(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
	}
	return "(missing)"
}
