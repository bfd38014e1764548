package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// exitRecordingChild runs the CLI with the arguments after the first and
// writes its exit status to the file the first names: tmux does not always
// record the status of a pane's process.
const exitRecordingChild = "sosappliance-recording-exit"

func runRecordingExit(args []string) int {
	code := run(args[1:])
	// Renamed into place, so the test never reads it half written.
	if os.WriteFile(args[0]+".tmp", []byte(strconv.Itoa(code)), 0o644) == nil {
		os.Rename(args[0]+".tmp", args[0])
	}
	return code
}

// TestStatusWatchInTmux runs `status --watch` in a tmux pane of 80 columns
// against a running controller daemon: the screen has the header, the
// sessions, switches and agents sections, no line wider than the pane, it
// is redrawn (its tick counter moves on), and Ctrl-C ends it with status 0.
func TestStatusWatchInTmux(t *testing.T) {
	testsupport.RequireBinaries(t, "tmux")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	if err := os.WriteFile(cfgPath, []byte(controllerConfig(freePort(t), freePort(t), 5201)), 0o644); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "control.sock")
	testsupport.StartDaemon(t, testsupport.Command(t, mainChild, "run", "-c", cfgPath, "--node", "ctl",
		"--state", filepath.Join(dir, "state.db"), "--control-socket", socket, "--root", t.TempDir(), "--metrics-listen", ""))
	testsupport.Eventually(t, converges, "daemon serving status", func() bool {
		st, err := appliance.FetchStatus(context.Background(), socket)
		return err == nil && len(st.Switches) == 2
	})

	// A tmux server of the test's own, gone with it.
	server := fmt.Sprintf("sos-watch-%d-%s", os.Getpid(), filepath.Base(filepath.Dir(dir)))
	tmux := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-L", server, "-f", "/dev/null"}, args...)...).CombinedOutput()
		return string(out), err
	}
	exitFile := filepath.Join(dir, "watch.exit")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tmux("new-session", "-d", "-s", "watch", "-x", "80", "-y", "30",
		"-e", testsupport.ChildEnv+"="+exitRecordingChild, "-e", "TERM=screen",
		self, exitFile, "status", "--watch", "--control-socket", socket); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { tmux("kill-server") })
	if out, err := tmux("set-option", "-t", "watch", "remain-on-exit", "on"); err != nil {
		t.Fatalf("tmux set-option: %v\n%s", err, out)
	}
	if out, err := tmux("set-option", "-t", "watch", "remain-on-exit-format", ""); err != nil {
		t.Fatalf("tmux set-option: %v\n%s", err, out)
	}
	if w, _ := tmux("display-message", "-p", "-t", "watch", "#{pane_width}"); strings.TrimSpace(w) != "80" {
		t.Fatalf("pane width %q, want 80", w)
	}

	capture := func() string {
		out, err := tmux("capture-pane", "-p", "-t", "watch")
		if err != nil {
			t.Fatalf("tmux capture-pane: %v\n%s", err, out)
		}
		return out
	}
	tickOf := regexp.MustCompile(`every 1s  #(\d+)\n`)
	var first string
	testsupport.Eventually(t, converges, "first frame", func() bool {
		first = capture()
		return tickOf.MatchString(first) && strings.Contains(first, "AGENTS 2")
	})
	for _, want := range []string{
		"sosappliance ctl (controller)",
		"config sha256:",
		"SESSIONS 0",
		"SWITCHES 2 (0 connected)",
		"  NAME          DATAPATH                 CONN   FLOWS  LAST ERROR",
		"  sw            00:00:00:00:00:00:5a:01  no         0",
		"AGENTS 2",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("screen lacks %q", want)
		}
	}
	for i, line := range strings.Split(first, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
		}
	}
	firstTick := tickOf.FindStringSubmatch(first)[1]
	testsupport.Eventually(t, converges, "screen redrawn", func() bool {
		m := tickOf.FindStringSubmatch(capture())
		return m != nil && m[1] != firstTick
	})
	if t.Failed() {
		t.Logf("screen:\n%s", first)
	}

	if out, err := tmux("send-keys", "-t", "watch", "C-c"); err != nil {
		t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
	var code []byte
	testsupport.Eventually(t, converges, "watch ended by Ctrl-C", func() bool {
		code, err = os.ReadFile(exitFile)
		return err == nil
	})
	if string(code) != "0" {
		t.Errorf("watch ended by Ctrl-C with exit status %s, want 0", code)
	}
	if screen := capture(); strings.TrimSpace(screen) != "" {
		t.Errorf("the watch left its frame on the shell's screen:\n%s", screen)
	}
}

// freePort is a loopback port reserved for the test (testsupport.FreePorts).
func freePort(t *testing.T) int {
	t.Helper()
	return testsupport.FreePorts(t, 1)[0]
}
