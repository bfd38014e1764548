package labnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ovsSchema is where Debian's openvswitch-common installs the database
// schema.
const ovsSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// ovs is the lab's private Open vSwitch: a database and a switch daemon
// whose sockets, database and logs live in the lab's directory, so the lab
// never talks to (or disturbs) a system Open vSwitch.
type ovs struct {
	dir string
	env []string
}

func newOVS(dir string) *ovs {
	return &ovs{
		dir: dir,
		env: append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_LOGDIR="+dir, "OVS_DBDIR="+dir,
			"OVS_SYSCONFDIR="+dir, "OVS_PKGDATADIR=/usr/share/openvswitch"),
	}
}

func (o *ovs) dbSocket() string { return filepath.Join(o.dir, "db.sock") }

// tool runs an OVS command-line tool against this instance.
func (o *ovs) tool(ctx context.Context, name string, args ...string) (string, error) {
	return runEnv(ctx, o.env, name, args...)
}

func (o *ovs) vsctl(ctx context.Context, args ...string) (string, error) {
	return o.tool(ctx, "ovs-vsctl", append([]string{"--db=unix:" + o.dbSocket(), "--timeout=20"}, args...)...)
}

// ofctl runs ovs-ofctl with OpenFlow 1.3; a bridge name as the target
// reaches that bridge's management socket in the instance directory.
func (o *ovs) ofctl(ctx context.Context, args ...string) (string, error) {
	return o.tool(ctx, "ovs-ofctl", append([]string{"-O", "OpenFlow13"}, args...)...)
}

func (o *ovs) createDB(ctx context.Context) error {
	_, err := o.tool(ctx, "ovsdb-tool", "create", filepath.Join(o.dir, "conf.db"), ovsSchema)
	return err
}

func (o *ovs) serverArgs() []string {
	return []string{filepath.Join(o.dir, "conf.db"),
		"--remote=punix:" + o.dbSocket(),
		"--pidfile=" + filepath.Join(o.dir, "ovsdb-server.pid"),
		"--unixctl=" + filepath.Join(o.dir, "ovsdb-server.ctl"),
		"--log-file=" + filepath.Join(o.dir, "ovsdb-server.log"),
		"-vconsole:off", "--no-chdir"}
}

// switchMalloc is the C library's heap policy for the switch daemon.
//
// The userspace datapath allocates a buffer of a frame's size for every
// packet it receives and frees it once sent. With 9000-byte frames a
// batch of 32 packets leaves more than glibc's default trim threshold
// (128 KiB) free at the top of the heap, so glibc gave it back to the
// kernel after nearly every batch (brk) and faulted it in again for the
// next. On this 2-core VM each return is a TLB shootdown, an
// interprocessor interrupt: perf on the lab's ovs-vswitchd during an
// 8-stripe transfer put 12 % of its time in brk's TLB flush and 9 % in
// page faults, with the daemon at 80-100 % of a core and its port
// sockets dropping what agents sent (`ss -0 -m`: thousands of drops per
// run on a-agent). A hardware switch has no such cost. A trim threshold
// of 64 MiB keeps the freed buffers in the heap.
const switchMalloc = "GLIBC_TUNABLES=glibc.malloc.trim_threshold=67108864"

// switchEnv is the environment the switch daemon runs with.
func (o *ovs) switchEnv() []string { return mergeTunables(o.env, switchMalloc) }

// mergeTunables adds tunables (GLIBC_TUNABLES=...) to env, after any the
// environment sets already (the later setting of a tunable wins).
func mergeTunables(env []string, tunables string) []string {
	const key = "GLIBC_TUNABLES="
	out := make([]string, 0, len(env)+1)
	var own []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key); ok {
			own = append(own, v)
			continue
		}
		out = append(out, kv)
	}
	return append(out, key+strings.Join(append(own, strings.TrimPrefix(tunables, key)), ":"))
}

func (o *ovs) switchArgs() []string {
	return []string{"unix:" + o.dbSocket(),
		"--pidfile=" + filepath.Join(o.dir, "ovs-vswitchd.pid"),
		"--unixctl=" + filepath.Join(o.dir, "ovs-vswitchd.ctl"),
		"--log-file=" + filepath.Join(o.dir, "ovs-vswitchd.log"),
		// --disable-system keeps the kernel datapath out of it: the lab
		// uses the userspace datapath only.
		"-vconsole:off", "--no-chdir", "--disable-system"}
}

func (o *ovs) waitDB(ctx context.Context) error {
	return poll(ctx, 15*time.Second, "ovsdb-server socket", func() (bool, error) {
		_, err := os.Stat(o.dbSocket())
		return err == nil, nil
	})
}

// bridge describes one site switch to create.
type bridge struct {
	name        string
	datapathID  uint64
	controllers []string // OVS targets such as "tcp:127.0.0.1:6653"; none without
	ports       []bridgePort
}

type bridgePort struct {
	name   string
	ofport uint32
}

// addBridge creates the bridge with all its ports in one transaction, on the
// userspace datapath, secure fail mode and OpenFlow 1.3 only.
func (o *ovs) addBridge(ctx context.Context, b bridge) error {
	args := []string{"add-br", b.name,
		"--", "set", "bridge", b.name, "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13",
		fmt.Sprintf("other_config:datapath-id=%016x", b.datapathID),
		// The controller is reached out of band; in-band hidden flows would
		// only add noise to the flow table.
		"other_config:disable-in-band=true"}
	for _, p := range b.ports {
		args = append(args, "--", "add-port", b.name, p.name,
			"--", "set", "interface", p.name, fmt.Sprintf("ofport_request=%d", p.ofport))
	}
	var ids []string
	for i, target := range b.controllers {
		// Reconnect within a second instead of OVS's default 8 s backoff,
		// so a restarted controller takes over quickly.
		id := fmt.Sprintf("@ctl_%s_%d", strings.ReplaceAll(b.name, "-", "_"), i)
		args = append(args, "--", "--id="+id, "create", "controller", "target="+strconv.Quote(target), "max_backoff=1000")
		ids = append(ids, id)
	}
	if len(ids) > 0 {
		// Several controllers: the switch connects to each (they agree
		// on roles).
		args = append(args, "--", "set", "bridge", b.name, "controller="+strings.Join(ids, ","))
	}
	if _, err := o.vsctl(ctx, args...); err != nil {
		return fmt.Errorf("bridge %s: %w", b.name, err)
	}
	return nil
}

// connected reports whether every bridge is connected to its controller.
func (o *ovs) connected(ctx context.Context) (bool, error) {
	out, err := o.vsctl(ctx, "--bare", "--columns=is_connected", "list", "controller")
	if err != nil {
		return false, err
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return false, nil
	}
	for _, f := range fields {
		if f != "true" {
			return false, nil
		}
	}
	return true, nil
}
