// Package ovstest runs a private Open vSwitch for tests and the lab: an
// ovsdb-server and an ovs-vswitchd on the userspace datapath in a temporary
// directory, with ovs-vswitchd inside its own network namespace so that
// several instances (parallel test packages, the lab) never fight over the
// "ovs-netdev" tap device every userspace datapath creates. It also wires
// network namespaces to bridges with veth pairs and reads flow tables back.
//
// Every function that creates something registers its removal with
// t.Cleanup, so nothing is left behind even when a test fails.
package ovstest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// Binaries are the programs an Instance needs.
var Binaries = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ip", "ethtool"}

// Require skips the test when it cannot run here (not root, or a binary is
// missing), except under CI=true where a missing prerequisite is a failure.
// It is testsupport.RequireRoot, named here for tests that use an Instance
// (Require(t, Binaries...)).
func Require(t testing.TB, binaries ...string) {
	t.Helper()
	testsupport.RequireRoot(t, binaries...)
}

var nameCounter atomic.Uint32

// UniqueName returns a name no other test process uses at the same time,
// short enough for an interface name (15 bytes) when prefix is at most 4.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s%x%x", prefix, os.Getpid()&0xffffff, nameCounter.Add(1))
}

// Instance is one running Open vSwitch.
type Instance struct {
	// Dir holds the database, sockets, pid files and logs.
	Dir string
	// Namespace is the network namespace ovs-vswitchd runs in.
	Namespace string

	env      []string
	dbSock   string
	ovsdb    *exec.Cmd
	vswitchd *exec.Cmd
}

// Start runs a fresh ovsdb-server and ovs-vswitchd and stops them (and
// removes their namespace and directory) when the test ends.
func Start(t testing.TB) *Instance {
	t.Helper()
	Require(t, Binaries...)
	// Unix socket paths are limited to 108 bytes, so keep the directory short
	// rather than under t.TempDir's long per-test path.
	dir, err := os.MkdirTemp("", "ovs")
	if err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	inst := &Instance{
		Dir:       dir,
		Namespace: UniqueName("ovs"),
		dbSock:    filepath.Join(dir, "db.sock"),
	}
	inst.env = append(os.Environ(),
		"OVS_RUNDIR="+dir, "OVS_LOGDIR="+dir, "OVS_DBDIR="+dir, "OVS_SYSCONFDIR="+dir, "OVS_PKGDATADIR=/usr/share/openvswitch")
	t.Cleanup(func() { inst.stop(t) })
	if err := inst.start(); err != nil {
		t.Fatalf("ovstest: %v", err)
	}
	return inst
}

func (i *Instance) start() error {
	db := filepath.Join(i.Dir, "conf.db")
	if out, err := i.command("ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema").CombinedOutput(); err != nil {
		return fmt.Errorf("ovsdb-tool create: %w: %s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "add", i.Namespace).CombinedOutput(); err != nil {
		return fmt.Errorf("create namespace %s: %w: %s", i.Namespace, err, out)
	}
	if out, err := exec.Command("ip", "-n", i.Namespace, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("loopback up in %s: %w: %s", i.Namespace, err, out)
	}
	i.ovsdb = i.command("ovsdb-server", db,
		"--remote=punix:"+i.dbSock,
		"--pidfile="+filepath.Join(i.Dir, "ovsdb-server.pid"),
		"--unixctl="+filepath.Join(i.Dir, "ovsdb-server.ctl"),
		"--log-file="+filepath.Join(i.Dir, "ovsdb-server.log"),
		"-vconsole:off", "--no-chdir")
	if err := i.ovsdb.Start(); err != nil {
		return fmt.Errorf("start ovsdb-server: %w", err)
	}
	if !testsupport.Poll(10*time.Second, func() bool { _, err := os.Stat(i.dbSock); return err == nil }) {
		return fmt.Errorf("ovsdb-server socket: not ready after %v", 10*time.Second)
	}
	if _, err := i.Vsctl("--no-wait", "init"); err != nil {
		return err
	}
	i.vswitchd = i.command("ip", "netns", "exec", i.Namespace, "ovs-vswitchd", "unix:"+i.dbSock,
		"--pidfile="+filepath.Join(i.Dir, "ovs-vswitchd.pid"),
		"--unixctl="+filepath.Join(i.Dir, "ovs-vswitchd.ctl"),
		"--log-file="+filepath.Join(i.Dir, "ovs-vswitchd.log"),
		"-vconsole:off", "--no-chdir", "--disable-system")
	if err := i.vswitchd.Start(); err != nil {
		return fmt.Errorf("start ovs-vswitchd: %w", err)
	}
	// A vsctl that waits for ovs-vswitchd to apply the change proves it runs.
	if _, err := i.Vsctl("--timeout=20", "set", "Open_vSwitch", ".", "external_ids:ovstest=ready"); err != nil {
		return fmt.Errorf("ovs-vswitchd did not come up: %w", err)
	}
	return nil
}

func (i *Instance) stop(t testing.TB) {
	for _, c := range []*exec.Cmd{i.vswitchd, i.ovsdb} {
		if c == nil || c.Process == nil {
			continue
		}
		_ = c.Process.Signal(unix.SIGCONT) // a paused switch cannot exit
		_ = c.Process.Signal(unix.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
	if t.Failed() {
		if log, err := os.ReadFile(filepath.Join(i.Dir, "ovs-vswitchd.log")); err == nil {
			t.Logf("ovs-vswitchd.log (tail):\n%s", tail(string(log), 40))
		}
	}
	// Deleting the namespace removes the datapath's tap devices with it.
	_ = exec.Command("ip", "netns", "del", i.Namespace).Run()
	_ = os.RemoveAll(i.Dir)
}

func (i *Instance) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = i.env
	c.Dir = i.Dir
	return c
}

// Env is the environment that points the OVS command-line tools at this
// instance (OVS_RUNDIR and friends).
func (i *Instance) Env() []string { return append([]string(nil), i.env...) }

// DBSocket is the database socket for --db=unix:...
func (i *Instance) DBSocket() string { return i.dbSock }

// Vsctl runs ovs-vsctl against this instance.
func (i *Instance) Vsctl(args ...string) (string, error) {
	return i.run("ovs-vsctl", append([]string{"--db=unix:" + i.dbSock}, args...)...)
}

// Ofctl runs ovs-ofctl with OpenFlow 1.3 against this instance; a bridge
// name as target reaches the bridge's management socket in Dir.
//
// ovs-vswitchd recreates a bridge's management socket when it reconfigures
// the bridge (a controller target or port added just before), and an
// ovs-ofctl that comes in meanwhile fails to open it ("failed to open
// socket", seen as ENOENT, ECONNREFUSED or EPIPE on a loaded machine).
// Such a command never reached the switch, so it is run again, for at most
// two seconds; any other failure is returned at once.
func (i *Instance) Ofctl(args ...string) (string, error) {
	args = append([]string{"-O", "OpenFlow13"}, args...)
	deadline := time.Now().Add(2 * time.Second)
	for {
		out, err := i.run("ovs-ofctl", args...)
		if err == nil || !strings.Contains(err.Error(), "failed to open socket") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Appctl runs ovs-appctl against this instance's ovs-vswitchd.
func (i *Instance) Appctl(args ...string) (string, error) {
	return i.run("ovs-appctl", append([]string{"-t", filepath.Join(i.Dir, "ovs-vswitchd.ctl")}, args...)...)
}

// Exec runs a command inside the namespace of ovs-vswitchd.
func (i *Instance) Exec(name string, args ...string) (string, error) {
	return i.run("ip", append([]string{"netns", "exec", i.Namespace, name}, args...)...)
}

func (i *Instance) run(name string, args ...string) (string, error) {
	c := i.command(name, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Listen opens a listener inside the namespace of ovs-vswitchd, where its
// bridges can reach it (e.g. "tcp", "127.0.0.1:0"). A controller under test
// serves on it; the bridges connect to tcp:127.0.0.1:PORT.
func (i *Instance) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := i.InNamespace(func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// DialContext opens a connection from inside the namespace of ovs-vswitchd,
// to reach a bridge that listens with ptcp:PORT:127.0.0.1.
func (i *Instance) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := i.InNamespace(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// InNamespace runs fn on an OS thread switched into the namespace of
// ovs-vswitchd. Sockets created by fn stay in that namespace for life.
func (i *Instance) InNamespace(fn func() error) error {
	return inNamespace(i.Namespace, fn)
}

func inNamespace(name string, fn func() error) error { return tuning.RunInNamedNetns(name, fn) }

// FreePort returns a TCP port on 127.0.0.1 inside the namespace of
// ovs-vswitchd, free and reserved for the test (testsupport.FreePorts),
// for a bridge or a controller to listen on.
func (i *Instance) FreePort(t testing.TB) int {
	t.Helper()
	return testsupport.FreePortsWhere(t, 1, func(port int) error {
		ln, err := i.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			ln.Close()
		}
		return err
	})[0]
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// PauseSwitch stops ovs-vswitchd (SIGSTOP) without closing its sockets:
// to its controllers the link goes silent, as when a cable is cut.
func (i *Instance) PauseSwitch() error { return i.vswitchd.Process.Signal(unix.SIGSTOP) }

// ResumeSwitch continues a paused ovs-vswitchd.
func (i *Instance) ResumeSwitch() error { return i.vswitchd.Process.Signal(unix.SIGCONT) }
