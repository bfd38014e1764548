package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestApplyForgetGoneBesideTheDaemon: the daemon holds the
// record of an item whose interface went away for good and its warning
// says "--forget-gone=eth3 forgets it"; the README's way to forget it is
// `apply --forget-gone` (or rollback --forget-gone, refused beside the
// daemon since before). The plan of the daemon's own file then holds one
// change, forgetting that record: it touches nothing on the host, and the
// daemon has nothing to undo. apply now refuses it as "changes made beside"
// the daemon, so the record can only be forgotten by stopping the daemon
// (its relays' sessions with it). Found by review (helper-83).
func TestApplyForgetGoneBesideTheDaemon(t *testing.T) {
	n := newTuningNode(t)
	testsupport.WriteTree(t, n.root, map[string]string{"proc/sys/net/ipv4/conf/eth3/rp_filter": "1\n"})
	file := func(extra string) string {
		return `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = {
  "net.core.rmem_max" = "67108864"
` + extra + `
} }
node "host1" { tuning = ["t"] }
`
	}
	writeConfig(t, n.cfg, file(`"net.ipv4.conf.eth3.rp_filter" = "2"`))
	d := n.run(t, "1h")
	t.Cleanup(func() { _ = d.Cmd.Process.Kill() })
	rpFilter := func() string {
		b, _ := os.ReadFile(filepath.Join(n.root, "proc/sys/net/ipv4/conf/eth3/rp_filter"))
		return strings.TrimSpace(string(b))
	}
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" && rpFilter() == "2" })
	// eth3 is gone for good; the file no longer names it.
	testsupport.RequireNoError(t, os.RemoveAll(filepath.Join(n.root, "proc/sys/net/ipv4/conf/eth3")))
	writeConfig(t, n.cfg, file(""))
	testsupport.Eventually(t, converges, "the reload", func() bool { return strings.Contains(d.Output.String(), "reloaded") })

	code, out, errOut := runCLI(t, "apply", "--auto-approve", "--forget-gone=eth3", "-c", n.cfg, "--node", "host1",
		"--state", filepath.Join(n.dir, "state.db"), "--root", n.root, "--control-socket", n.socket)
	if code != 0 {
		t.Errorf("apply --forget-gone=eth3 of the daemon's own file, whose only change forgets the held record of gone eth3: exit %d, "+
			"want it forgotten (nothing on the host changes, nothing for the daemon to undo):\n%s%s", code, out, errOut)
	}
}

// TestApplyBesideTheDaemonOnAnotherState: the daemon runs with
// the state_path of its file; the operator edits state_path (the daemon
// refuses that reload: state_path is taken at start only) and a value,
// then runs `apply`. apply opens the new state_path, finds no daemon lock
// on the fresh database it just made, and applies beside the running
// daemon, exit 0; the daemon still converges this host with its file and
// puts its own value back at its next drift check. The refusal is keyed
// on the state file only, while the daemon answers on the control socket
// apply could ask (as ConvergeSwitches does). Found by review (helper-83).
func TestApplyBesideTheDaemonOnAnotherState(t *testing.T) {
	n := newTuningNode(t)
	daemonBlock := func(state string) string {
		return `daemon {
  control_socket = "` + n.socket + `"
  state_path     = "` + state + `"
}`
	}
	writeConfig(t, n.cfg, hostTuningFile("67108864", daemonBlock(filepath.Join(n.dir, "state.db"))))
	d := n.run(t, "1h")
	t.Cleanup(func() { _ = d.Cmd.Process.Kill() })
	testsupport.Eventually(t, converges, "first convergence", func() bool { return rmemMaxIn(t, n.root) == "67108864" })

	writeConfig(t, n.cfg, hostTuningFile("33554432", daemonBlock(filepath.Join(n.dir, "moved", "state.db"))))
	testsupport.RequireNoError(t, os.MkdirAll(filepath.Join(n.dir, "moved"), 0o755))
	code, out, errOut := runCLI(t, "apply", "--auto-approve", "-c", n.cfg, "--node", "host1", "--root", n.root)
	if code == 0 {
		t.Errorf("apply beside a running daemon (answering on %s, its file edited to another state_path): exit 0, rmem_max %s, "+
			"which the daemon's drift check puts back to 67108864; want the refusal apply gives on the daemon's own state:\n%s%s",
			n.socket, rmemMaxIn(t, n.root), out, errOut)
	}
}

// TestPlanOutCommandSurvivesTheShell: plan -out prints "apply it
// with: sosappliance apply ..." quoted for a shell. A plan file whose
// path holds a '!' is printed bare; pasted into an interactive bash
// (history expansion on, its default) the word is expanded ("!b": event
// not found, or another command's words spliced in). Run here through
// bash with history expansion on, as an interactive shell has it, the
// printed command must give apply the same arguments. Found by review
// (helper-83).
func TestPlanOutCommandSurvivesTheShell(t *testing.T) {
	bash, err := exec.LookPath("bash")
	testsupport.RequireNoError(t, err)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	testsupport.WriteTree(t, root, map[string]string{"proc/sys/net/core/somaxconn": "128\n"})
	cfg := filepath.Join(dir, "sos.hcl")
	writeConfig(t, cfg, `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" { sysctl = { "net.core.somaxconn" = "4096" } }
node "host1" { tuning = ["t"] }
`)
	state := filepath.Join(dir, "state.db")
	planFile := filepath.Join(dir, "plan!b.out")
	code, out, errOut := runCLI(t, "plan", "-c", cfg, "--node", "host1", "--state", state, "--root", root, "-out", planFile)
	if code != 0 {
		t.Fatalf("plan -out: exit %d\n%s%s", code, out, errOut)
	}
	_, line, ok := strings.Cut(out, "apply it with: ")
	if !ok {
		t.Fatalf("no apply command printed:\n%s", out)
	}
	line = strings.TrimSpace(line)
	// An interactive bash's reading: history on, history expansion on;
	// sosappliance prints the words it is given.
	script := "set -o history -H\nsosappliance() { printf '%s\\n' \"$@\"; }\n" + line + "\n"
	cmd := exec.Command(bash, "--norc", "--noprofile")
	cmd.Stdin = strings.NewReader(script)
	cmd.Env = append(os.Environ(), "HISTFILE=/dev/null")
	got, err := cmd.CombinedOutput()
	want := strings.Join([]string{"apply", planFile, "--node", "host1", "--state", state, "--root", root}, "\n") + "\n"
	if err != nil || string(got) != want {
		t.Errorf("the printed command %q, read by bash with history expansion: %v\n%s\nwant the words\n%s", line, err, got, want)
	}
}

// TestCheckNodeFilesChangesNothing: validate --this-node (what
// the packages run before a restart, beside the running daemon) builds
// the relays, the controller and the cluster part as run does. For an
// agent's node, the controller's node (with a cluster block naming an
// etcd endpoint) and a node that only tunes, it must create no file, bind
// nothing (the controller's listen address stays free for the running
// daemon), dial no etcd, and leave no goroutine behind. Written by
// review (helper-83); it passed.
func TestCheckNodeFilesChangesNothing(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	testsupport.RequireNoError(t, os.WriteFile(psk, []byte(strings.Repeat("ab", 32)+"\n"), 0o600))
	etcd, err := net.Listen("tcp", "127.0.0.1:0")
	testsupport.RequireNoError(t, err)
	defer etcd.Close()
	ports := testsupport.FreePorts(t, 1)
	ctlListen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	state := filepath.Join(dir, "var", "state.db")
	file := strings.Replace(twoSiteFile(psk, "", fmt.Sprintf(`
tuning "t" { sysctl = { "net.core.somaxconn" = "4096" } }
node "tuner" { tuning = ["t"] }
cluster {
  etcd      = ["http://%s"]
  lease_ttl = "3s"
}
daemon { state_path = %q }
`, etcd.Addr(), state)), `controller { node = "ctl" }`, fmt.Sprintf(`controller {
  node   = "ctl"
  listen = %q
}`, ctlListen), 1)
	cfg := filepath.Join(dir, "sos.hcl")
	writeConfig(t, cfg, file)
	listing := func() string {
		var names []string
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { names = append(names, p); return nil })
		return strings.Join(names, "\n")
	}
	before, goroutines := listing(), runtime.NumGoroutine()
	for _, node := range []string{"host-a1", "ctl", "tuner"} {
		if code, out, errOut := runCLI(t, "validate", "-c", cfg, "--node", node, "--this-node"); code != 0 {
			t.Errorf("validate --node %s --this-node: exit %d\n%s%s", node, code, out, errOut)
		}
	}
	if after := listing(); after != before {
		t.Errorf("validate --this-node changed the files:\nbefore\n%s\nafter\n%s", before, after)
	}
	l, err := net.Listen("tcp", ctlListen)
	if err != nil {
		t.Errorf("the controller's listen address %s is held after validate --this-node: %v", ctlListen, err)
	} else {
		l.Close()
	}
	etcd.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := etcd.Accept(); err == nil {
		c.Close()
		t.Errorf("validate --this-node dialed the cluster's etcd")
	}
	left := runtime.NumGoroutine()
	for i := 0; i < 50 && left > goroutines; i++ {
		time.Sleep(20 * time.Millisecond)
		left = runtime.NumGoroutine()
	}
	if left > goroutines {
		t.Errorf("validate --this-node left %d goroutine(s) running", left-goroutines)
	}
}
