package labnet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// requireLab skips a test that cannot run here (not root, a program
// missing), except under CI=true, where a missing prerequisite fails it:
// CI must never pass by skipping the real thing.
func requireLab(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up network namespaces and Open vSwitch; not in -short")
	}
	err := CheckPrerequisites(Options{Wanem: "/bin/true"})
	if err == nil {
		_, err = exec.LookPath("go")
	}
	testsupport.RequireNoError(t, err)
}

var (
	wanemOnce sync.Once
	wanemPath string
	wanemErr  error
)

// wanemBinary builds the emulator once per test binary.
func wanemBinary(t testing.TB) string {
	t.Helper()
	wanemOnce.Do(func() {
		dir, err := os.MkdirTemp("", "labnet-bin")
		if err != nil {
			wanemErr = err
			return
		}
		wanemPath = filepath.Join(dir, "wanem")
		out, err := exec.Command("go", "build", "-o", wanemPath, "github.com/sosappliance/sosappliance/examples/lab/cmd/wanem").CombinedOutput()
		if err != nil {
			wanemErr = fmt.Errorf("go build wanem: %v: %s", err, out)
		}
	})
	if wanemErr != nil {
		t.Fatal(wanemErr)
	}
	return wanemPath
}

// plainOptions is a lab without the appliance, on a fast WAN. It uses the
// machine's one state directory, like every lab, so that `lab list` shows it
// and `lab down` knows its owner is alive.
func plainOptions(t testing.TB) Options {
	t.Helper()
	return Options{
		Config:   "../sos.hcl",
		Wanem:    wanemBinary(t),
		WAN:      WAN{Rate: 1_000_000_000, RTT: 2 * time.Millisecond, Seed: 1},
		Progress: testWriter{t},
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// labNamespaces lists the namespaces that carry a lab's prefix.
func labNamespaces(t testing.TB, id string) []string {
	t.Helper()
	all, err := listNetns()
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, ns := range all {
		if strings.HasPrefix(ns, NamespacePrefix+id+"-") {
			mine = append(mine, ns)
		}
	}
	return mine
}

// assertGone checks that nothing of a lab is left: no namespace, no
// process, no directory.
func assertGone(t *testing.T, rec Record) {
	t.Helper()
	if left := labNamespaces(t, rec.ID); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	for _, p := range rec.Processes {
		if p.Alive() {
			t.Errorf("process %s (pid %d) still runs", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(rec.Dir); !os.IsNotExist(err) {
		t.Errorf("lab directory %s still exists (%v)", rec.Dir, err)
	}
}

func TestUpBuildsTheTopologyAndDownRemovesIt(t *testing.T) {
	requireLab(t)
	ctx := context.Background()
	defaults := map[string]string{}
	for _, name := range []string{"rmem_default", "wmem_default"} {
		defaults[name] = readSysctl(t, name)
	}
	lab, err := Up(ctx, plainOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.Down() })
	rec := lab.ledger.snapshot()

	if got := len(labNamespaces(t, lab.ID)); got != len(allHosts) {
		t.Errorf("%d namespaces, want %d", got, len(allHosts))
	}
	// Interfaces: MTU 9000, offloads off, IPv6 off, the config's MAC on the
	// agents.
	for _, c := range []struct {
		host Host
		dev  string
		mac  string
	}{
		{Client, "eth0", "02:5a:00:00:01:0a"}, {Server, "eth0", "02:5a:00:00:02:0a"},
		{AgentA, "eth0", "02:5a:00:00:01:02"}, {AgentB, "eth0", "02:5a:00:00:02:02"},
		{WANHost, "wan-a", ""}, {SwitchHost, "a-wan", ""}, {SwitchHost, "b-agent", ""},
	} {
		out, err := run(ctx, "ip", "-n", lab.Namespace(c.host), "-o", "link", "show", "dev", c.dev)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "mtu 9000") {
			t.Errorf("%s/%s: %s", c.host, c.dev, out)
		}
		if c.mac != "" && !strings.Contains(out, "link/ether "+c.mac) {
			t.Errorf("%s/%s: want MAC %s: %s", c.host, c.dev, c.mac, out)
		}
		feats, err := lab.Run(ctx, c.host, "ethtool", "-k", c.dev)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tx-checksumming: off", "tcp-segmentation-offload: off", "generic-segmentation-offload: off", "generic-receive-offload: off"} {
			if !strings.Contains(feats, f) {
				t.Errorf("%s/%s: want %q", c.host, c.dev, f)
			}
		}
	}
	if out, _ := lab.Run(ctx, Client, "sysctl", "-n", "net.ipv6.conf.all.disable_ipv6"); strings.TrimSpace(out) != "1" {
		t.Errorf("client IPv6 on: %q", out)
	}
	if out, _ := lab.Run(ctx, Server, "sysctl", "-n", "net.ipv4.tcp_wmem"); strings.Join(strings.Fields(out), " ") != UntunedSysctls["net.ipv4.tcp_wmem"] {
		t.Errorf("server tcp_wmem %q, want the stock %q", out, UntunedSysctls["net.ipv4.tcp_wmem"])
	}
	// Bridges: userspace datapath, secure fail mode, the config's datapath
	// ids, ports numbered as the config expects.
	for _, c := range []struct {
		bridge, dpid string
		ports        map[string]string
	}{
		{"br-a", "0000000000000a01", map[string]string{"a-client": "1", "a-agent": "2", "a-wan": "3", "a-ctl": "4"}},
		{"br-b", "0000000000000b01", map[string]string{"b-server": "1", "b-agent": "2", "b-wan": "3"}},
	} {
		out, err := lab.Vsctl(ctx, "get", "bridge", c.bridge, "datapath_type", "fail_mode", "other_config:datapath-id")
		if err != nil {
			t.Fatal(err)
		}
		if want := "netdev\nsecure\n\"" + c.dpid + "\"\n"; out != want {
			t.Errorf("%s: got %q, want %q", c.bridge, out, want)
		}
		for port, ofport := range c.ports {
			out, err := lab.Vsctl(ctx, "get", "interface", port, "ofport")
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(out) != ofport {
				t.Errorf("%s ofport %s, want %s", port, out, ofport)
			}
		}
	}
	// The lab's OVS is private: its database lives in the lab directory.
	if _, err := os.Stat(filepath.Join(lab.Dir, "ovs", "conf.db")); err != nil {
		t.Error(err)
	}
	// Every port socket of the switch has a switch port's buffer, and the
	// machine's defaults are back as they were.
	assertPortBuffers(t, lab, 7)
	// The switch daemon keeps the heap its packet buffers came from
	// (switchMalloc).
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", lab.Process("ovs-vswitchd").Ref.PID))
	if err != nil {
		t.Fatal(err)
	}
	// (glibc may cut the variable's value where it parsed it: look for
	// the setting itself.)
	if !strings.Contains(string(env), "\x00GLIBC_TUNABLES=") || !strings.Contains(string(env), strings.TrimPrefix(switchMalloc, "GLIBC_TUNABLES=")) {
		t.Errorf("ovs-vswitchd runs without the lab's heap policy %q", switchMalloc)
	}
	for name, want := range defaults {
		if got := readSysctl(t, name); got != want {
			t.Errorf("%s is %q after lab up, was %q before", name, got, want)
		}
	}
	assertWANStats(t, lab)

	if err := lab.Down(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rec)
	if err := lab.Down(); err != nil {
		t.Errorf("second Down: %v", err)
	}
}

func TestUpCancelledLeavesNothing(t *testing.T) {
	requireLab(t)
	opts := plainOptions(t)
	idPattern := regexp.MustCompile(`^lab ([0-9a-f]{4}): `)
	for _, after := range []time.Duration{100 * time.Millisecond, 700 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		lab, err := Up(ctx, opts)
		cancel()
		if err == nil {
			// The machine was quick enough: the lab is complete, and Down
			// must remove it.
			t.Logf("up within %v", after)
			rec := lab.ledger.snapshot()
			if err := lab.Down(); err != nil {
				t.Fatal(err)
			}
			assertGone(t, rec)
			continue
		}
		t.Logf("cancelled after %v: %v", after, err)
		m := idPattern.FindStringSubmatch(err.Error())
		if m == nil {
			// Up stopped before it made anything.
			continue
		}
		if left := labNamespaces(t, m[1]); len(left) > 0 {
			t.Errorf("namespaces left: %v", left)
		}
		if _, err := os.Stat(filepath.Join(DefaultStateDir, m[1])); !os.IsNotExist(err) {
			t.Errorf("lab directory of %s left (%v)", m[1], err)
		}
	}
}

// crashingOwnerChild is the child that brings up a lab with the wanem
// binary in args[0] and dies without teardown.
const crashingOwnerChild = "crashing-lab-owner"

func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.Children{crashingOwnerChild: crashingOwner})
}

func crashingOwner(args []string) int {
	opts := Options{Config: "../sos.hcl", Wanem: args[0],
		WAN: WAN{Rate: 1_000_000_000, RTT: 2 * time.Millisecond, Seed: 1}}
	if _, err := Up(context.Background(), opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	// Die the hard way: no deferred function, no cleanup, no signal handler.
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func TestReapRemovesALabWhoseOwnerDied(t *testing.T) {
	requireLab(t)
	opts := plainOptions(t)
	cmd := testsupport.Command(t, crashingOwnerChild, opts.Wanem)
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die by SIGKILL: %v: %s", err, out)
	}
	recs, err := List(DefaultStateDir)
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	for _, r := range recs {
		if r.Owner != nil && r.Owner.PID == cmd.Process.Pid {
			rec = r
		}
	}
	if rec.ID == "" || !rec.Orphaned() {
		t.Fatalf("no orphaned lab of pid %d among %+v", cmd.Process.Pid, recs)
	}
	t.Cleanup(func() { _ = Teardown(rec) })
	if len(labNamespaces(t, rec.ID)) == 0 {
		t.Fatal("the crashed lab's namespaces are already gone; nothing to reap")
	}
	// The kernel ended the lab's processes with their owner.
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range rec.Processes {
		for p.Alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if p.Alive() {
			t.Errorf("%s (pid %d) outlived its lab's owner", p.Name, p.PID)
		}
	}
	reaped, err := Reap(DefaultStateDir, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reaped, rec.ID) {
		t.Errorf("reaped %v, want %s among them", reaped, rec.ID)
	}
	assertGone(t, rec)
}

func TestReapLeavesLiveAndPersistentLabsAlone(t *testing.T) {
	dir := t.TempDir()
	self, err := selfRef("owner")
	if err != nil {
		t.Fatal(err)
	}
	dead := ProcessRef{Name: "owner", PID: self.PID, Start: self.Start + 1}
	for _, rec := range []Record{
		{ID: "live", Owner: &self, Created: time.Now()},
		{ID: "kept", Created: time.Now()},
		{ID: "dead", Owner: &dead, Created: time.Now()},
	} {
		sub := filepath.Join(dir, rec.ID)
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		rec.Dir = sub
		if _, err := createLedger(sub, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "broken"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, ".new-123"), 0o700); err != nil {
		t.Fatal(err)
	}
	reaped, err := Reap(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(reaped, ",") != "broken,dead" && strings.Join(reaped, ",") != "dead,broken" {
		t.Errorf("reaped %v, want the dead owner's lab and the one without a ledger", reaped)
	}
	for _, id := range []string{"live", "kept", ".new-123"} {
		if _, err := os.Stat(filepath.Join(dir, id)); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

func TestProcStatReadsThisProcess(t *testing.T) {
	start, state, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if start == 0 || (state != 'R' && state != 'S') {
		t.Errorf("start %d state %c", start, state)
	}
	self, _ := selfRef("me")
	if !self.Alive() {
		t.Error("this process is not alive")
	}
	recycled := self
	recycled.Start++
	if recycled.Alive() {
		t.Error("a pid with another start time counts as alive")
	}
	if err := recycled.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("signal to a recycled pid: %v", err)
	}
	// CPU time: this process's grows while it computes; a recycled pid
	// has none. The test computes until the kernel's own account of the
	// process (getrusage) has 200 ms more CPU time, however long a loaded
	// machine takes to give it that, and then CPUTime must have grown by
	// at least a quarter of it: a wrong field or scale stays far below.
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := self.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	used := rusage()
	for x, deadline := uint64(1), time.Now().Add(2*time.Minute); rusage()-used < 200*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("the process got %v of CPU time in 2 minutes of computing", rusage()-used)
		}
		for range 100000 {
			x = x*6364136223846793005 + 1
		}
	}
	used = rusage() - used
	after, err := self.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 50*time.Millisecond {
		t.Errorf("CPU time grew %v while the process used %v computing", after-before, used)
	}
	if _, err := recycled.CPUTime(); err == nil {
		t.Error("CPU time of a recycled pid")
	}
}

// TestUpWithTwoAgentsPerSite brings up the network of `lab up --agents 2`:
// a second agent namespace on port 5 of each bridge with the config's next
// MAC and address, a second client on port 6 of br-a with a path to the
// server, and Down removes all of it.
func TestUpWithTwoAgentsPerSite(t *testing.T) {
	requireLab(t)
	ctx := context.Background()
	opts := plainOptions(t)
	opts.Agents = 2
	lab, err := Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.Down() })
	rec := lab.ledger.snapshot()

	if got, want := len(labNamespaces(t, lab.ID)), len(allHosts)+3; got != want {
		t.Errorf("%d namespaces, want %d", got, want)
	}
	for _, c := range []struct {
		host     Host
		mac, ip  string
		bridge   string
		port, of string
	}{
		{agentHost(AgentA, 1), "02:5a:00:00:01:03", "10.10.1.3/16", "br-a", "a-agent2", "5"},
		{agentHost(AgentB, 1), "02:5a:00:00:02:03", "10.10.2.3/16", "br-b", "b-agent2", "5"},
		{Client2, client2MAC, "10.10.1.11/16", "br-a", "a-client-2", "6"},
	} {
		out, err := run(ctx, "ip", "-n", lab.Namespace(c.host), "-o", "addr", "show", "dev", "eth0")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, c.ip) {
			t.Errorf("%s: want %s: %s", c.host, c.ip, out)
		}
		link, _ := run(ctx, "ip", "-n", lab.Namespace(c.host), "-o", "link", "show", "dev", "eth0")
		if !strings.Contains(link, "link/ether "+c.mac) || !strings.Contains(link, "mtu 9000") {
			t.Errorf("%s: want MAC %s, MTU 9000: %s", c.host, c.mac, link)
		}
		of, err := lab.Vsctl(ctx, "get", "interface", c.port, "ofport")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(of) != c.of {
			t.Errorf("%s ofport %s, want %s", c.port, of, c.of)
		}
	}
	if got := fmt.Sprint(lab.Clients()); got != "[client client-2]" {
		t.Errorf("clients %s", got)
	}
	if n := len(lab.SiteAgents(0)) + len(lab.SiteAgents(1)); n != 4 {
		t.Errorf("%d agents, want 4", n)
	}
	// The second client reaches the server across the WAN.
	ln, err := lab.Listen(Server, "tcp", ServerAddr.String()+":7")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := lab.Dial(dctx, Client2, "tcp", ServerAddr.String()+":7")
	if err != nil {
		t.Fatalf("second client to server: %v", err)
	}
	c.Close()

	if err := lab.Down(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rec)
}

// A lab namespace that nothing runs in and no lab directory names is a
// stray only once it is older than a minute: a younger one may belong to a
// lab under another state directory that is still being built (`lab down
// --state-dir X` must not take another lab's namespaces away).
func TestYoungNamespaceIsNoStray(t *testing.T) {
	requireLab(t)
	ns := NamespacePrefix + fmt.Sprintf("y%03x", os.Getpid()%4096) + "-probe"
	if _, err := run(context.Background(), "ip", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteNetns(ns) })
	strays, err := StrayNamespaces(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strays {
		if s == ns {
			t.Fatalf("a namespace created a moment ago is called a stray: %v", strays)
		}
	}
}

func readSysctl(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc/sys/net/core", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// assertPortBuffers checks that the switch reads and writes each of its
// ports (want of them) through a socket of switchPortBuffer bytes.
func assertPortBuffers(t *testing.T, lab *Lab, want int) {
	t.Helper()
	socks, err := lab.SwitchPortSockets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		if s.RecvBuffer != switchPortBuffer || s.SendBuffer != switchPortBuffer {
			t.Errorf("switch port socket %s: buffers %d/%d, want %d", s.Port, s.RecvBuffer, s.SendBuffer, switchPortBuffer)
		}
	}
	if len(socks) != want {
		t.Errorf("%d switch port sockets, want %d: %+v", len(socks), want, socks)
	}
}

// assertWANStats reads the emulator's counters around a connection
// attempt from the client to the server (refused: a SYN over the WAN and
// a reset back) and checks that they moved in both directions.
func assertWANStats(t *testing.T, lab *Lab) {
	t.Helper()
	ctx := context.Background()
	before, err := lab.WANStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || before[0].AtoBName != "wan-a->wan-b" || before[0].BtoAName != "wan-b->wan-a" {
		t.Fatalf("WANStats: %+v, want one emulator between wan-a and wan-b", before)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c, err := lab.Dial(dctx, Client, "tcp", netip.AddrPortFrom(ServerAddr, 7).String()); err == nil {
		c.Close()
	}
	after, err := lab.WANStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d, err := after[0].Since(before[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.AtoB.ReceivedPackets == 0 || d.BtoA.ReceivedPackets == 0 || d.AtoB.ForwardedPackets == 0 {
		t.Errorf("the WAN counted nothing of a connection attempt across it: %+v", d)
	}
	if d.AtoB.QueueDropPackets != 0 || d.AtoB.LossDropPackets != 0 {
		t.Errorf("a lossless idle WAN dropped frames: %+v", d.AtoB)
	}
}
