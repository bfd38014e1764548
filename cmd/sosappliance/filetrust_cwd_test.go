package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Root has cd'd into user 65534's empty directory pub/incoming (to look
// at an upload) and 65534 removed it; root then runs
// `sosappliance apply -c ../sos.hcl`, the config it meant being one
// directory up. filetrust's walk cannot name the working directory
// (getcwd: ENOENT) and walks "../sos.hcl" from "/" instead, where it
// finds nothing and passes; the config is read by the kernel from the
// removed directory's parent, pub/sos.hcl, 65534's file. apply writes
// 65534's net.core.somaxconn=31337 as root.
// Found by review (helper-89); on 45557b1 somaxconn becomes 31337.
func TestApplyFromRemovedWorkingDirectory(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	dir := testsupport.SharedTempDir(t)
	root := filepath.Join(dir, "root")
	somaxconn := filepath.Join(root, "proc/sys/net/core/somaxconn")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/somaxconn": "128\n"})
	state := filepath.Join(dir, "state", "state.db")
	pub := filepath.Join(dir, "pub")
	incoming := filepath.Join(pub, "incoming")
	testsupport.RequireNoError(t, os.MkdirAll(incoming, 0o755))
	testsupport.RequireNoError(t, os.Chown(pub, 65534, 65534))
	testsupport.RequireNoError(t, os.Chown(incoming, 65534, 65534))
	config := `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.somaxconn" = "31337" } }
node "host1" { tuning = ["t"] }
daemon { state_path = "` + state + `" }
`
	out, err := testsupport.AsOtherUser(t, "sh", "-c", "printf '%s' '"+config+"' > "+pub+"/sos.hcl").CombinedOutput()
	testsupport.Require(t, err == nil, "as 65534: %v %s", err, out)
	t.Chdir(incoming)
	out, err = testsupport.AsOtherUser(t, "rmdir", incoming).CombinedOutput()
	testsupport.Require(t, err == nil, "as 65534: %v %s", err, out)

	code, stdout, stderr := runCLI(t, "apply", "--auto-approve", "-c", "../sos.hcl", "--node", "host1", "--root", root)
	b, _ := os.ReadFile(somaxconn)
	if v := strings.TrimSpace(string(b)); v == "31337" {
		t.Errorf("apply -c ../sos.hcl from a removed working directory wrote user 65534's net.core.somaxconn=31337 as root (exit %d)\n%s%s", code, stdout, stderr)
	}
}
