package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// sysctlHost writes a host tree with per-interface sysctls of eth3
// (ipv4 conf) and of eth2 (ipv6 neigh), applies a config tuning
// them, and returns the CLI runner and the root.
func sysctlHost(t *testing.T) (cli func(args ...string) (int, string, string), root string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "root")
	testsupport.WriteTree(t, root, map[string]string{
		"proc/sys/net/core/rmem_max":                          "212992\n",
		"proc/sys/net/ipv4/conf/eth3/rp_filter":               "1\n",
		"proc/sys/net/ipv6/neigh/eth2/base_reachable_time_ms": "30000\n",
		"proc/sys/net/ipv4/conf/all/rp_filter":                "1\n",
		"sys/devices/system/cpu/online":                       "0-3\n",
	})
	cfgPath := filepath.Join(dir, "sos.hcl")
	if err := os.WriteFile(cfgPath, []byte(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = {
    "net.core.rmem_max" = "67108864"
    "net.ipv4.conf.eth3.rp_filter" = "2"
    "net.ipv6.neigh.eth2.base_reachable_time_ms" = "60000"
  }
}
node "host1" { tuning = ["t"] }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"-c", cfgPath, "--node", "host1", "--state", filepath.Join(dir, "state.db"), "--root", root}
	cli = func(args ...string) (int, string, string) { return runCLI(t, append(args, common...)...) }
	if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	return cli, root
}

// TestForgetGoneOfSysctlInterfaces: the per-interface sysctl records of
// an interface's IPv4 conf (net.ipv4.conf.eth3.*) and of its IPv6
// neighbour table (net.ipv6.neigh.eth2.*) are held when their interface
// is gone, each warning naming --forget-gone=eth3 / eth2;
// --forget-gone=eth3 (given twice) forgets eth3's only, and
// --forget-gone=eth2 then eth2's.
func TestForgetGoneOfSysctlInterfaces(t *testing.T) {
	cli, root := sysctlHost(t)
	for _, d := range []string{"proc/sys/net/ipv4/conf/eth3", "proc/sys/net/ipv6/neigh/eth2"} {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := cli("rollback", "--auto-approve")
	t.Logf("rollback: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(out, "--forget-gone=eth3 forgets it") || !strings.Contains(out, "--forget-gone=eth2 forgets it") ||
		!strings.Contains(errOut, "2 item(s) not put back") {
		t.Errorf("rollback with eth3 and eth2 gone: exit %d, want 1 and both held, each naming its interface", code)
	}
	code, out, errOut = cli("rollback", "--auto-approve", "--forget-gone=eth3", "--forget-gone=eth3,eth3")
	t.Logf("rollback --forget-gone=eth3: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(errOut, "1 item(s) not put back") || strings.Contains(out, "--forget-gone=eth3 forgets it") {
		t.Errorf("rollback --forget-gone=eth3: exit %d, want 1, eth2's record still held, the VLAN's forgotten", code)
	}
	code, out, errOut = cli("rollback", "--auto-approve", "--forget-gone=eth2")
	if code != 0 {
		t.Errorf("rollback --forget-gone=eth2: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSingleDashForgetGone: the CLI takes its long flags with one dash
// as well (normalizeArgs: plan -out, -detailed-exitcode, apply
// -auto-approve, as the help and messages write them), -forget-gone
// too. (Found by review: `rollback -forget-gone=eth2` failed with
// pflag's "unknown shorthand flag: 'f'".)
func TestSingleDashForgetGone(t *testing.T) {
	cli, root := sysctlHost(t)
	if err := os.RemoveAll(filepath.Join(root, "proc/sys/net/ipv6/neigh/eth2")); err != nil {
		t.Fatal(err)
	}
	// plan refuses the file's own eth2 item (the interface is gone), but
	// after parsing the flag; rollback forgets the held record.
	for _, args := range [][]string{{"plan", "-forget-gone=eth2"}, {"plan", "-forget-gone"}} {
		if code, out, errOut := cli(args...); strings.Contains(errOut, "unknown shorthand") || !strings.Contains(errOut, "eth2") {
			t.Errorf("%v: exit %d, want the flag taken and the gone eth2 named\n%s%s", args, code, out, errOut)
		}
	}
	if code, out, errOut := cli("rollback", "-auto-approve", "-forget-gone=eth2"); code != 0 {
		t.Errorf("rollback -auto-approve -forget-gone=eth2: exit %d, want 0 as with --forget-gone\n%s%s", code, out, errOut)
	}
}
