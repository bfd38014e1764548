package wanem

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

const (
	addrA = "10.99.0.1"
	addrB = "10.99.0.2"
)

// wire is a throwaway topology: host namespace A with interface "a", a WAN
// namespace holding "wan0" (peer of a) and "wan1" (peer of b), and host
// namespace B with "b". Nothing joins wan0 and wan1 until a test does.
type wire struct {
	nsA, nsWAN, nsB string
}

var wireSeq atomic.Int64

func run(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newWire builds the namespaces with MTU 9000 veths whose offloads are off,
// as the emulator needs, and removes them when the test ends.
func newWire(tb testing.TB) *wire {
	tb.Helper()
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), wireSeq.Add(1))
	w := &wire{nsA: "wanem-a-" + suffix, nsWAN: "wanem-wan-" + suffix, nsB: "wanem-b-" + suffix}
	for _, ns := range []string{w.nsA, w.nsWAN, w.nsB} {
		run(tb, "ip", "netns", "add", ns)
		tb.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				tb.Errorf("remove namespace %s: %v\n%s", ns, err, out)
			}
		})
		// Without IPv6 the only frames on the wire are the ones tests send
		// and ARP.
		run(tb, "ip", "netns", "exec", ns, "sysctl", "-qw",
			"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
		run(tb, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(tb, "ip", "-n", w.nsA, "link", "add", "name", "a", "type", "veth", "peer", "name", "wan0", "netns", w.nsWAN)
	run(tb, "ip", "-n", w.nsB, "link", "add", "name", "b", "type", "veth", "peer", "name", "wan1", "netns", w.nsWAN)
	for _, end := range []struct{ ns, dev string }{
		{w.nsA, "a"}, {w.nsWAN, "wan0"}, {w.nsWAN, "wan1"}, {w.nsB, "b"},
	} {
		run(tb, "ip", "-n", end.ns, "link", "set", "dev", end.dev, "mtu", "9000", "up")
		run(tb, "ip", "netns", "exec", end.ns, "ethtool", "-K", end.dev,
			"tso", "off", "gso", "off", "gro", "off", "tx", "off")
	}
	run(tb, "ip", "-n", w.nsA, "addr", "add", addrA+"/24", "dev", "a")
	run(tb, "ip", "-n", w.nsB, "addr", "add", addrB+"/24", "dev", "b")
	return w
}

// bridge joins wan0 and wan1 with a kernel bridge: the path without the
// emulator that benchmarks measure against.
func (w *wire) bridge(tb testing.TB) {
	tb.Helper()
	run(tb, "ip", "-n", w.nsWAN, "link", "add", "br0", "type", "bridge")
	run(tb, "ip", "-n", w.nsWAN, "link", "set", "wan0", "master", "br0")
	run(tb, "ip", "-n", w.nsWAN, "link", "set", "wan1", "master", "br0")
	run(tb, "ip", "-n", w.nsWAN, "link", "set", "br0", "mtu", "9000", "up")
}

// inNamespace runs fn on an OS thread switched into namespace ns. Sockets
// fn opens stay in ns after the thread switches back. If switching back
// fails the thread is left locked, so Go discards it rather than reuse a
// thread in the wrong namespace.
func inNamespace(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- func() error {
			orig, err := netns.Get()
			if err != nil {
				return fmt.Errorf("current namespace: %w", err)
			}
			defer orig.Close()
			target, err := netns.GetFromName(ns)
			if err != nil {
				return fmt.Errorf("namespace %s: %w", ns, err)
			}
			defer target.Close()
			if err := netns.Set(target); err != nil {
				return fmt.Errorf("enter %s: %w", ns, err)
			}
			fnErr := fn()
			if err := netns.Set(orig); err != nil {
				return fmt.Errorf("leave %s: %w", ns, err)
			}
			runtime.UnlockOSThread()
			return fnErr
		}()
	}()
	return <-done
}

// startEmulator joins wan0 and wan1 with an emulator opened inside the WAN
// namespace and stops it when the test ends.
func (w *wire) startEmulator(tb testing.TB, cfg Config) *Emulator {
	tb.Helper()
	var em *Emulator
	err := inNamespace(w.nsWAN, func() error {
		var err error
		em, err = New("wan0", "wan1", cfg)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("emulator: %v", err)
		}
		tb.Logf("emulator counters:\n%v", em.Stats())
	})
	return em
}

// iperf3 runs an iperf3 client in namespace A against a server in B and
// returns the received rate in bits per second.
func (w *wire) iperf3(tb testing.TB, streams, seconds int) float64 {
	tb.Helper()
	server := exec.Command("ip", "netns", "exec", w.nsB, "iperf3", "-s", "-1", "-B", addrB, "--forceflush")
	stdout, err := server.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := server.Start(); err != nil {
		tb.Fatalf("start iperf3 server: %v", err)
	}
	defer func() {
		_ = server.Process.Kill()
		_ = server.Wait()
	}()
	listening := make(chan bool, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if strings.Contains(scanner.Text(), "Server listening") {
				listening <- true
				break
			}
		}
		close(listening)
		for scanner.Scan() {
		}
	}()
	select {
	case ok := <-listening:
		if !ok {
			tb.Fatal("iperf3 server exited before listening")
		}
	case <-time.After(10 * time.Second):
		tb.Fatal("iperf3 server did not start listening within 10s")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+30)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", w.nsA, "iperf3", "-c", addrB,
		"-P", fmt.Sprint(streams), "-t", fmt.Sprint(seconds), "-J").Output()
	if err != nil {
		tb.Fatalf("iperf3 client: %v\n%s", err, out)
	}
	var result struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &result); err != nil {
		tb.Fatalf("iperf3 JSON: %v\n%s", err, out)
	}
	if result.Error != "" {
		tb.Fatalf("iperf3: %s", result.Error)
	}
	return result.End.SumReceived.BitsPerSecond
}
