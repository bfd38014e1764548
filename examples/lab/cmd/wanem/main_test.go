package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

// runMainEnv makes the test binary act as the wanem command, so the signal
// test runs the real main inside a namespace without building it apart.
const runMainEnv = "WANEM_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParseFlagsForTheLabWAN(t *testing.T) {
	opts, err := parseFlags([]string{
		"--a", "wan0", "--b", "wan1", "--delay", "100ms", "--rate", "500mbit",
		"--loss", "0.001", "--seed", "7", "--stats-every", "10s",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := wanem.Shape{Delay: 100 * time.Millisecond, Rate: 500e6, Loss: 0.001, Seed: 7, Burst: wanem.DefaultBurst}
	if opts.ifA != "wan0" || opts.ifB != "wan1" || opts.shape != want || opts.statsEvery != 10*time.Second {
		t.Errorf("parsed %+v, want wan0 wan1 %+v every 10s", opts, want)
	}
	// The queue defaults to one bandwidth-delay product: 500 Mbit/s × 200 ms.
	if got := opts.shape.EffectiveQueueBytes(); got != 12_500_000 {
		t.Errorf("default queue = %d bytes, want 12500000", got)
	}

	opts, err = parseFlags([]string{"--a", "x", "--b", "y", "--queue", "2MB", "--burst", "1ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.shape.QueueBytes != 2_000_000 || opts.shape.Burst != time.Millisecond || opts.shape.Rate != 0 {
		t.Errorf("parsed %+v, want queue 2000000 burst 1ms unlimited rate", opts.shape)
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

func requireRootAndTools(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs " + strings.Join(missing, ", "))
	}
	t.Skip("needs " + strings.Join(missing, ", "))
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestCommandPrintsCountersOnSignalsAndExitsOnTERM(t *testing.T) {
	requireRootAndTools(t, "ip")
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

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self,
		"--a", "wan0", "--b", "wan1", "--delay", "5ms", "--rate", "100mbit", "--loss", "0.01")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	waitFor(t, "the startup line", func() bool { return strings.Contains(stderr.String(), "wanem: joining wan0 and wan1") })
	if !strings.Contains(stderr.String(), "delay=5ms rate=100000000bit/s queue=1048576B loss=0.01 seed=1 burst=2ms") {
		t.Errorf("startup line does not show the shape: %q", stderr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "counters after SIGUSR1", func() bool { return strings.Count(stdout.String(), "dir=") == 2 })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
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
