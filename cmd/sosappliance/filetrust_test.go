package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The attack: another user of the node can write a file that apply acts
// on as root, and edits it: the config, a saved plan (plan -out to a
// shared place), or the state database. Before, apply wrote what they
// said. Now apply refuses each, naming the file and the fix, and changes
// nothing; plan and validate warn about the config.
func TestApplyRefusesFilesOthersCanWrite(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	dir := testsupport.SharedTempDir(t)
	root := filepath.Join(dir, "root")
	somaxconn := filepath.Join(root, "proc/sys/net/core/somaxconn")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/somaxconn": "128\n"})
	value := func() string {
		b, _ := os.ReadFile(somaxconn)
		return strings.TrimSpace(string(b))
	}
	asNobody := func(script string) {
		t.Helper()
		out, err := testsupport.AsOtherUser(t, "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("as another user: %s: %v\n%s", script, err, out)
		}
	}
	state := filepath.Join(dir, "state", "state.db")
	cfg := filepath.Join(dir, "sos.hcl")
	writeConfig(t, cfg, `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.somaxconn" = "4096" } }
node "host1" { tuning = ["t"] }
daemon { state_path = "`+state+`" }
`)
	testsupport.RequireNoError(t, os.Chmod(cfg, 0o644))
	args := []string{"-c", cfg, "--node", "host1", "--root", root}

	// A saved plan another user can write.
	planFile := filepath.Join(dir, "saved.plan")
	if code, out, errOut := runCLI(t, append([]string{"plan", "-out", planFile}, args...)...); code != 0 {
		t.Fatalf("plan -out: exit %d\n%s%s", code, out, errOut)
	}
	testsupport.RequireNoError(t, os.Chmod(planFile, 0o666))
	asNobody(editInPlace(planFile))
	code, out, errOut := runCLI(t, append([]string{"apply", planFile}, args...)...)
	if code == 0 || !strings.Contains(errOut, "plan file "+planFile+" is writable by every user (mode 0666)") {
		t.Errorf("apply of a plan file another user edited: exit %d\n%s%s", code, out, errOut)
	}
	if v := value(); v != "128" {
		t.Errorf("somaxconn is %s after apply of a plan file another user edited, want 128 untouched", v)
	}

	// A config another user can write.
	testsupport.RequireNoError(t, os.Chmod(cfg, 0o666))
	asNobody(editInPlace(cfg))
	code, out, errOut = runCLI(t, append([]string{"apply", "--auto-approve"}, args...)...)
	if code == 0 || !strings.Contains(errOut, "config file "+cfg+" is writable by every user (mode 0666)") {
		t.Errorf("apply of a config another user edited: exit %d\n%s%s", code, out, errOut)
	}
	if v := value(); v != "128" {
		t.Errorf("somaxconn is %s after apply of a config another user edited, want 128 untouched", v)
	}
	// plan, validate and rollback (which reads the state path in it)
	// warn.
	for _, cmd := range []string{"plan", "validate", "rollback"} {
		a := args
		switch cmd {
		case "validate":
			a = []string{"-c", cfg}
		case "rollback":
			a = append([]string{"--auto-approve"}, args...)
		}
		code, out, errOut := runCLI(t, append([]string{cmd}, a...)...)
		if code != 0 || !strings.Contains(errOut, "warning: config file "+cfg+" is writable by every user (mode 0666)") ||
			!strings.Contains(errOut, "apply and run refuse it") {
			t.Errorf("%s of a config others can write: exit %d, want 0 and a warning\n%s%s", cmd, code, out, errOut)
		}
	}
	code, out, errOut = runCLI(t, "validate", "-c", cfg, "--node", "host1", "--this-node")
	if code == 0 || !strings.Contains(errOut, "is writable by every user") {
		t.Errorf("validate --this-node of a config others can write: exit %d, want 1 (run refuses it)\n%s%s", code, out, errOut)
	}

	// A state database another user can write: what it records, apply
	// and rollback write back.
	testsupport.RequireNoError(t, os.Chmod(cfg, 0o644))
	testsupport.RequireNoError(t, os.Chown(cfg, 0, 0))
	if code, out, errOut := runCLI(t, append([]string{"apply", "--auto-approve"}, args...)...); code != 0 || value() != "65535" {
		t.Fatalf("apply of root's file: exit %d, somaxconn %s\n%s%s", code, value(), out, errOut)
	}
	testsupport.RequireNoError(t, os.Chmod(state, 0o666))
	for _, cmd := range [][]string{{"plan"}, {"apply", "--auto-approve"}, {"rollback", "--auto-approve"}} {
		code, out, errOut := runCLI(t, append(cmd, args...)...)
		if code == 0 || !strings.Contains(out+errOut, "state database "+state+" is writable by every user (mode 0666)") {
			t.Errorf("%s with a state database others can write: exit %d\n%s%s", cmd[0], code, out, errOut)
		}
	}
	if v := value(); v != "65535" {
		t.Errorf("somaxconn is %s after refused commands, want 65535 untouched", v)
	}
	testsupport.RequireNoError(t, os.Chmod(state, 0o600))
	if code, out, errOut := runCLI(t, append([]string{"rollback", "--auto-approve"}, args...)...); code != 0 || value() != "128" {
		t.Errorf("rollback once the database is root's again: exit %d, somaxconn %s\n%s%s", code, value(), out, errOut)
	}
}

// editInPlace is a shell command that turns 4096 into 65535 in file,
// writing it in place (sed -i would need to write its directory).
func editInPlace(file string) string {
	return "s=$(sed 's/4096/65535/g' " + file + ") && printf '%s\\n' \"$s\" > " + file
}
