package testsupport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	echoChild  = "echo"
	sleepChild = "sleep"
)

func TestMain(m *testing.M) {
	Main(m, Children{
		echoChild: func(args []string) int {
			fmt.Println(strings.Join(args, " "))
			fmt.Fprintln(os.Stderr, "env:", os.Getenv(ChildEnv))
			return len(args)
		},
		sleepChild: func([]string) int {
			fmt.Println("ready")
			time.Sleep(time.Minute)
			return 0
		},
	})
}

// outcome records what a prerequisite check did instead of stopping the
// test.
type outcome struct {
	testing.TB
	skipped, failed string
}

func (o *outcome) Helper()                        {}
func (o *outcome) Skipf(format string, a ...any)  { o.skipped = fmt.Sprintf(format, a...) }
func (o *outcome) Fatalf(format string, a ...any) { o.failed = fmt.Sprintf(format, a...) }

func TestRequireSkipsLocallyAndFailsUnderCI(t *testing.T) {
	checks := map[string]func(tb testing.TB){
		"Require":         func(tb testing.TB) { Require(tb, false, "needs %s", "a thing") },
		"RequireNoError":  func(tb testing.TB) { RequireNoError(tb, fmt.Errorf("needs a thing")) },
		"RequireBinaries": func(tb testing.TB) { RequireBinaries(tb, "sh", "testsupport-no-such-program") },
	}
	want := map[string]string{
		"Require":         "cannot run here: needs a thing",
		"RequireNoError":  "cannot run here: needs a thing",
		"RequireBinaries": "cannot run here: needs testsupport-no-such-program",
	}
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		for name, check := range checks {
			var o outcome
			check(&o)
			got, other := o.skipped, o.failed
			if ci == "true" {
				got, other = o.failed, o.skipped
			}
			if !strings.HasPrefix(got, want[name]) || other != "" {
				t.Errorf("CI=%q %s: skipped %q, failed %q; want %q", ci, name, o.skipped, o.failed, want[name])
			}
		}
	}
	var o outcome
	Require(&o, true, "never")
	RequireNoError(&o, nil)
	RequireBinaries(&o, "sh")
	if o.skipped != "" || o.failed != "" {
		t.Errorf("met prerequisites reported: %+v", o)
	}
}

func TestCommandRunsTheNamedChild(t *testing.T) {
	cmd := Command(t, echoChild, "a", "b")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 2 || string(out) != "a b\n" {
		t.Fatalf("exit %d (%v), output %q; want 2, %q", code, err, out, "a b\n")
	}
	// The child does not hand ChildEnv on to the programs it starts.
	if stderr.String() != "env: \n" {
		t.Errorf("child saw %q", stderr.String())
	}
	unknown := Command(t, "no-such-child")
	if out, err := unknown.CombinedOutput(); unknown.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), `no child "no-such-child"`) {
		t.Errorf("unknown child: %v %s", err, out)
	}
}

func TestDaemonCollectsOutputAndIsKilled(t *testing.T) {
	d := StartDaemon(t, Command(t, sleepChild))
	Eventually(t, 10*time.Second, "child ready", func() bool { return d.Output.String() == "ready\n" })
	d.Kill()
	if ws, ok := d.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("child ended with %v, want SIGKILL", d.Err())
	}
	d.Kill() // again, after it has exited
	select {
	case <-d.Done():
	default:
		t.Error("Done not closed after Kill")
	}
}

func TestInFreshNetnsSeesOnlyLoopback(t *testing.T) {
	if !InFreshNetns(t) {
		return
	}
	// /sys still shows the parent's namespace (nothing remounted it);
	// /proc/self/net follows the process's own.
	dev, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(dev), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			names = append(names, name)
		}
	}
	if strings.Join(names, " ") != "lo" {
		t.Errorf("interfaces %v in a fresh namespace, want only lo", names)
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(time.Second, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Errorf("Poll stopped after %d calls", calls)
	}
	start := time.Now()
	if Poll(50*time.Millisecond, func() bool { return false }) {
		t.Error("Poll held for a condition that never holds")
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Error("Poll gave up before its timeout")
	}
}

func TestLockedBufferTakesConcurrentWrites(t *testing.T) {
	var b LockedBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Errorf("%d bytes, want 800", n)
	}
}

// TestFreePortsReservedOutsideEphemeral: the ports are distinct, free,
// below the range outgoing connections draw from, and held: another
// reservation of them (as the tests of another package would try)
// fails until the test ends.
func TestFreePortsReservedOutsideEphemeral(t *testing.T) {
	var ports []int
	t.Run("pick", func(t *testing.T) {
		ports = FreePorts(t, 8)
		_, hi := reservablePorts()
		dir, err := portLockDir()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if p >= hi || p < 1024 || seen[p] {
				t.Fatalf("port %d of %v: a duplicate or outside 1024-%d", p, ports, hi-1)
			}
			seen[p] = true
			if f, ok := reservePort(dir, p); ok {
				f.Close()
				t.Fatalf("port %d reserved twice", p)
			}
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Fatalf("port %d not free: %v", p, err)
			}
			ln.Close()
		}
	})
	dir, _ := portLockDir()
	for _, p := range ports {
		if _, err := os.Lstat(filepath.Join(dir, strconv.Itoa(p))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("port %d: its lock file is left behind (%v)", p, err)
		}
		f, ok := reservePort(dir, p)
		if !ok {
			t.Fatalf("port %d still reserved after its test ended", p)
		}
		releasePort(f)
	}
}
