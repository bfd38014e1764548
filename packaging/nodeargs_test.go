package packaging

// node_args in the deb postinst and the rpm postun, taken out of the
// script as it is and run in sh, with /usr/bin/sosappliance and systemctl
// stubbed and /run/systemd/system pointed into a temp dir. Found by review
// (helper-78) of 6cae37f: node_args read the unit files itself, and took a
// node systemd does not run for an ExecStart reset by a later drop-in, a
// quoted argument, a continued line, or drop-ins of /etc and /run in
// systemd's order. It now reads the argv systemd shows, which has all of
// them resolved; the cases below give what systemctl shows for each.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// nodeArgs runs the node_args of script with systemctl showing show (no
// systemd at all when show is "-").
func nodeArgs(t *testing.T, script, show string) string {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?ms)^node_args\(\) \{\n.*?^\}\n`).Find(src)
	if fn == nil {
		t.Fatalf("no node_args in %s", script)
	}
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bin, "sosappliance"), []byte("#!/bin/sh\necho '  --this-node   the node named by this host'\n"), 0o755)
	writeFile(t, filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\ncat \"$SHOW\"\n"), 0o755)
	writeFile(t, filepath.Join(root, "show"), []byte(show+"\n"), 0o644)
	if show != "-" {
		if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	body := strings.NewReplacer("/usr/bin/sosappliance", filepath.Join(bin, "sosappliance"),
		"/run/systemd/system", root+"/run/systemd/system").Replace(string(fn))
	cmd := exec.Command("sh", "-c", body+"\nnode_args\n")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "SHOW="+filepath.Join(root, "show"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node_args: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestNodeArgsWhatSystemdRuns(t *testing.T) {
	const show = "{ path=/usr/bin/sosappliance ; argv[]=%s ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
	cases := []struct{ name, argv, want string }{
		{"the shipped unit", "/usr/bin/sosappliance run -c /etc/sosappliance/sos.hcl", "--this-node"},
		{"--node value", "/usr/bin/sosappliance run --node sos-agent -c /etc/sosappliance/sos.hcl", "--node sos-agent --this-node"},
		{"--node=value", "/usr/bin/sosappliance run --node=sos-agent -c /etc/sosappliance/sos.hcl", "--node sos-agent --this-node"},
		{"-node value", "/usr/bin/sosappliance run -c /etc/sosappliance/sos.hcl -node sos-agent", "--node sos-agent --this-node"},
	}
	for _, script := range []string{"scripts/deb/postinst", "scripts/rpm/postun"} {
		for _, c := range cases {
			if got := nodeArgs(t, script, strings.Replace(show, "%s", c.argv, 1)); got != c.want {
				t.Errorf("%s, %s: node_args gives %q, want %q", script, c.name, got, c.want)
			}
		}
		if got := nodeArgs(t, script, "-"); got != "--this-node" {
			t.Errorf("%s without systemd: node_args gives %q, want --this-node", script, got)
		}
	}
}
