package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/wanem"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// mainChild is the child that acts as the wanem command, so the signal
// test runs the real main inside a namespace without building it apart.
const mainChild = "wanem"

func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.Children{
		mainChild: func(args []string) int { return run(args, os.Stdout, os.Stderr) },
	})
}

func TestParseFlagsForTheLabWAN(t *testing.T) {
	opts, err := parseFlags([]string{
		"--a", "wan0", "--b", "wan1", "--delay", "100ms", "--rate", "500mbit",
		"--loss", "0.001", "--seed", "7", "--stats-every", "10s",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := wanem.Shape{Delay: 100 * time.Millisecond, Rate: 500e6, Loss: 0.001, Seed: 7}
	if opts.ifA != "wan0" || opts.ifB != "wan1" || opts.shape != want || opts.statsEvery != 10*time.Second {
		t.Errorf("parsed %+v, want wan0 wan1 %+v every 10s", opts, want)
	}
	// The queue defaults to one bandwidth-delay product: 500 Mbit/s × 200 ms.
	if got := opts.shape.EffectiveQueueBytes(); got != 12_500_000 {
		t.Errorf("default queue = %d bytes, want 12500000", got)
	}

	opts, err = parseFlags([]string{"--a", "x", "--b", "y", "--queue", "2MB"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.shape.QueueBytes != 2_000_000 || opts.shape.Rate != 0 {
		t.Errorf("parsed %+v, want queue 2000000 unlimited rate", opts.shape)
	}
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"no interfaces", []string{"--rate", "1gbit"}, []string{"--a and --b"}},
		{"everything wrong at once", []string{"--a", "x", "--b", "y", "--rate", "fast", "--queue", "lots", "--loss", "2"},
			[]string{`rate "fast"`, `size "lots"`, "loss 2"}},
		{"zero queue", []string{"--a", "x", "--b", "y", "--queue", "0"}, []string{"--queue 0"}},
		{"stray argument", []string{"--a", "x", "--b", "y", "extra"}, []string{"unexpected arguments"}},
		{"negative stats interval", []string{"--a", "x", "--b", "y", "--stats-every", "-1s"}, []string{"--stats-every"}},
		// The token bucket's credit is gone with the bucket; say so.
		{"retired burst", []string{"--a", "x", "--b", "y", "--burst", "2ms"}, []string{"--burst is retired", "own clock"}},
	}
	for _, tc := range cases {
		_, err := parseFlags(tc.args, io.Discard)
		if err == nil {
			t.Errorf("%s: accepted %q", tc.name, tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
	}
}

func TestRunRefusesAMissingInterface(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"--a", "wanem-missing-a", "--b", "wanem-missing-b"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "wanem-missing-a") {
		t.Errorf("exit %d, stderr %q; want 1 naming the missing interface", code, stderr.String())
	}
}

func TestCommandPrintsCountersOnSignalsAndExitsOnTERM(t *testing.T) {
	testsupport.RequireRoot(t, "ip")
	ns := fmt.Sprintf("wanem-cmd-%d", os.Getpid())
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sh("ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("remove namespace %s: %v\n%s", ns, err, out)
		}
	})
	sh("ip", "-n", ns, "link", "add", "name", "wan0", "type", "veth", "peer", "name", "x0")
	sh("ip", "-n", ns, "link", "add", "name", "wan1", "type", "veth", "peer", "name", "x1")
	for _, dev := range []string{"wan0", "x0", "wan1", "x1"} {
		sh("ip", "-n", ns, "link", "set", "dev", dev, "up")
	}

	cmd := testsupport.CommandInNetns(t, ns, mainChild,
		"--a", "wan0", "--b", "wan1", "--delay", "5ms", "--rate", "100mbit", "--loss", "0.01")
	var stdout testsupport.LockedBuffer
	cmd.Stdout = &stdout
	child := testsupport.StartDaemon(t, cmd)
	stderr := child.Output

	testsupport.Eventually(t, 10*time.Second, "the startup line", func() bool { return strings.Contains(stderr.String(), "wanem: joining wan0 and wan1") })
	if !strings.Contains(stderr.String(), "delay=5ms rate=100000000bit/s queue=1048576B loss=0.01 seed=1\n") {
		t.Errorf("startup line does not show the shape: %q", stderr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "counters after SIGUSR1", func() bool { return strings.Count(stdout.String(), "dir=") == 2 })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-child.Done():
		if err := child.Err(); err != nil {
			t.Fatalf("wanem exited with %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wanem did not exit within 10s of SIGTERM")
	}

	var dirs []string
	scanner := bufio.NewScanner(strings.NewReader(stdout.String()))
	for scanner.Scan() {
		if fields := strings.Fields(scanner.Text()); len(fields) > 0 {
			dirs = append(dirs, fields[0])
		}
	}
	want := []string{"dir=wan0->wan1", "dir=wan1->wan0", "dir=wan0->wan1", "dir=wan1->wan0"}
	if strings.Join(dirs, " ") != strings.Join(want, " ") {
		t.Errorf("printed counters for %v, want once on SIGUSR1 and once on exit: %v\n%s", dirs, want, stdout.String())
	}
}
