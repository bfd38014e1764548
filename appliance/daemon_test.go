package appliance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// daemonConfig is a config in which host1 only has sysctl tuning, so the
// daemon runs against a temp tree shaped like /proc/sys.
func daemonConfig(rmemMax string) string {
	return `
security { psk_file = "/etc/sosappliance/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = {
    "net.core.rmem_max"        = "` + rmemMax + `"
    "net.ipv4.tcp_mtu_probing" = "1"
  }
}
node "host1" { tuning = ["t"] }
`
}

type testDaemon struct {
	t       *testing.T
	root    string
	dir     string
	cfgPath string
	socket  string
	state   string
	logs    *testsupport.LockedBuffer
	cancel  context.CancelFunc
	done    chan error
}

// startDaemon runs a daemon in-process over a temp host tree. cfgPath may be
// a symlink the test swaps later.
func startDaemon(t *testing.T, root, dir, cfgPath string, drift time.Duration) *testDaemon {
	t.Helper()
	return startDaemonWith(t, root, dir, cfgPath, daemonParams{node: "host1", drift: drift})
}

// daemonParams are what the daemon tests vary: the node, the drift
// interval (0: the config's), the metrics address ("": off) and the host
// executors (nil: tempHostExecutors of the root).
type daemonParams struct {
	node    string
	drift   time.Duration
	metrics string
	execs   map[string]tuning.Executor
}

func startDaemonWith(t *testing.T, root, dir, cfgPath string, p daemonParams) *testDaemon {
	t.Helper()
	td := &testDaemon{t: t, root: root, dir: dir, cfgPath: cfgPath,
		socket: filepath.Join(dir, "control.sock"), state: filepath.Join(dir, "state.db"), logs: &testsupport.LockedBuffer{}}
	metrics := p.metrics
	if p.execs == nil {
		p.execs = tempHostExecutors(root)
	}
	d, err := NewDaemon(Options{
		ConfigPath: cfgPath, Node: p.node, StatePath: td.state, ControlSocket: td.socket,
		MetricsListen: &metrics, Root: root, Executors: p.execs,
		Settle: 50 * time.Millisecond, DriftInterval: p.drift,
		Logger: slog.New(slog.NewTextHandler(td.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td.cancel, td.done = cancel, make(chan error, 1)
	go func() { td.done <- d.Run(ctx) }()
	t.Cleanup(td.stop)
	return td
}

func (td *testDaemon) stop() {
	if td.cancel == nil {
		return
	}
	td.cancel()
	if err := <-td.done; err != nil {
		td.t.Errorf("daemon: %v", err)
	}
	td.cancel = nil
	if td.t.Failed() {
		td.t.Logf("daemon log:\n%s", td.logs.String())
	}
}

func (td *testDaemon) sysctl(name string) string {
	b, _ := os.ReadFile(filepath.Join(td.root, "proc/sys", strings.ReplaceAll(name, ".", "/")))
	return strings.TrimSpace(string(b))
}

// waitFor polls cond; the bound only stops a broken daemon from hanging the
// test, and the time taken is logged (the bar is 2 s).
func (td *testDaemon) waitFor(what string, cond func() bool) {
	td.t.Helper()
	testsupport.Eventually(td.t, 15*time.Second, what, cond)
}

func (td *testDaemon) status() *Status {
	td.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := FetchStatus(ctx, td.socket)
	if err != nil {
		td.t.Fatalf("status: %v", err)
	}
	return st
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonReloadsOnEveryKindOfEdit(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	rel1, rel2 := filepath.Join(dir, "rel1", "sos.hcl"), filepath.Join(dir, "rel2", "sos.hcl")
	os.MkdirAll(filepath.Dir(rel1), 0o755)
	os.MkdirAll(filepath.Dir(rel2), 0o755)
	writeFile(t, rel1, daemonConfig("100000"))
	writeFile(t, rel2, daemonConfig("400000"))
	cfgPath := filepath.Join(dir, "sos.hcl")
	if err := os.Symlink(rel1, cfgPath); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, root, dir, cfgPath, time.Hour)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })
	first := td.status()
	if first.Serial != 1 || first.Node != "host1" || first.LastApply == nil || first.LastApply.Changes != 2 {
		t.Fatalf("status after start: %+v", first)
	}

	// Rename-save over the symlink's target.
	tmp := rel1 + ".tmp"
	writeFile(t, tmp, daemonConfig("200000"))
	if err := os.Rename(tmp, rel1); err != nil {
		t.Fatal(err)
	}
	td.waitFor("rename-save applied", func() bool { return td.sysctl("net.core.rmem_max") == "200000" })

	// Truncate and write in place.
	f, err := os.OpenFile(rel1, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(daemonConfig("300000"))
	f.Close()
	td.waitFor("in-place write applied", func() bool { return td.sysctl("net.core.rmem_max") == "300000" })

	// Config management swaps the symlink.
	next := filepath.Join(dir, "next.hcl")
	os.Symlink(rel2, next)
	if err := os.Rename(next, cfgPath); err != nil {
		t.Fatal(err)
	}
	td.waitFor("symlink swap applied", func() bool { return td.sysctl("net.core.rmem_max") == "400000" })

	// An invalid edit is refused and reported; the old state stays.
	writeFile(t, rel2, daemonConfig("400000")+"\nwhitelist \"w\" { server = \"nope\" }\n")
	td.waitFor("invalid edit reported", func() bool { return td.status().ReloadFails == 1 })
	st := td.status()
	if !strings.Contains(st.LastReload.Result, "failed") || td.sysctl("net.core.rmem_max") != "400000" {
		t.Fatalf("invalid edit: %+v, rmem_max %s", st.LastReload, td.sysctl("net.core.rmem_max"))
	}
	if !strings.Contains(td.logs.String(), "reload refused") {
		t.Errorf("invalid edit not logged")
	}

	// A valid edit after it recovers.
	writeFile(t, rel2, daemonConfig("500000"))
	td.waitFor("valid edit after an invalid one applied", func() bool { return td.sysctl("net.core.rmem_max") == "500000" })
	td.waitFor("reload reported ok", func() bool { return td.status().LastReload.Result == "ok" })

	// SIGHUP converges at once, without waiting for the drift period.
	writeFile(t, filepath.Join(root, "proc/sys/net/core/rmem_max"), "1\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	td.waitFor("SIGHUP put the value back", func() bool { return td.sysctl("net.core.rmem_max") == "500000" })

	// Status agrees with the live state and the store.
	st = td.status()
	raw, _ := os.ReadFile(rel2)
	sum := sha256.Sum256(raw)
	if st.ConfigHash != hex.EncodeToString(sum[:]) {
		t.Errorf("status config hash %s, file %x", st.ConfigHash, sum)
	}
	td.stop()
	s, err := store.Open(td.state, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	serial, _ := s.Serial()
	if st.Serial != serial || st.Reloads < 5 || st.ReloadFails != 1 {
		t.Errorf("status serial %d (store %d), reloads %d, failures %d", st.Serial, serial, st.Reloads, st.ReloadFails)
	}
}

func TestDaemonCorrectsDrift(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	td := startDaemon(t, root, dir, cfgPath, 300*time.Millisecond)
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })

	writeFile(t, filepath.Join(root, "proc/sys/net/core/rmem_max"), "212992\n")
	td.waitFor("drift corrected", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })
	td.waitFor("correction counted", func() bool {
		st := td.status()
		return st.Drift.Corrections == 1 && st.Drift.ByKind["sysctl"] == 1
	})
	var b bytes.Buffer
	td.status().WriteText(&b)
	if !strings.Contains(b.String(), "1 correction(s) (sysctl 1)") {
		t.Errorf("status text:\n%s", b.String())
	}
}

// daemonChildRole is the child that runs a daemon over a temp host tree.
const daemonChildRole = "daemon"

type daemonChild struct {
	Root, Dir, Config string
}

// runDaemonChild runs the daemon the JSON daemonChild in args[0] describes.
func runDaemonChild(args []string) int {
	var c daemonChild
	if err := json.Unmarshal([]byte(args[0]), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	off := ""
	d, err := NewDaemon(Options{
		ConfigPath: c.Config, Node: "host1", StatePath: filepath.Join(c.Dir, "state.db"),
		ControlSocket: filepath.Join(c.Dir, "control.sock"), MetricsListen: &off,
		Root: c.Root, Executors: tempHostExecutors(c.Root), DriftInterval: time.Hour,
	})
	if err == nil {
		err = d.Run(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestDaemonKill9Restart kills the daemon with SIGKILL and restarts it: the
// state is resumed, nothing unchanged is applied again, and the stale
// control socket is taken over.
func TestDaemonKill9Restart(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	spec, _ := json.Marshal(daemonChild{Root: root, Dir: dir, Config: cfgPath})
	td := &testDaemon{t: t, root: root, socket: filepath.Join(dir, "control.sock")}
	start := func() *testsupport.Daemon {
		return testsupport.StartDaemon(t, testsupport.Command(t, daemonChildRole, string(spec)))
	}
	child := start()
	td.waitFor("first daemon ready", func() bool {
		st, err := FetchStatus(context.Background(), td.socket)
		return err == nil && st.Serial == 1
	})
	if err := child.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-child.Done()

	start()
	td.waitFor("restarted daemon ready", func() bool {
		st, err := FetchStatus(context.Background(), td.socket)
		return err == nil && st.LastApply != nil
	})
	st := td.status()
	if st.Serial != 1 || st.LastApply.Changes != 0 {
		t.Fatalf("restart applied again: serial %d, changes %d", st.Serial, st.LastApply.Changes)
	}
	if td.sysctl("net.core.rmem_max") != "100000" {
		t.Fatalf("host state lost: %s", td.sysctl("net.core.rmem_max"))
	}
}

func TestDaemonMetrics(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	td := startDaemonWith(t, root, dir, cfgPath, daemonParams{node: "host1", metrics: addr})
	td.waitFor("initial convergence", func() bool { return td.sysctl("net.core.rmem_max") == "100000" })
	writeFile(t, cfgPath, "this is not HCL {")
	td.waitFor("failed reload", func() bool { return td.status().ReloadFails == 1 })

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sosappliance_reloads_total{result="failed"} 1`,
		`sosappliance_applies_total{result="ok"} 1`,
		`sosappliance_state_serial 1`,
		`sosappliance_sessions 0`,
		`sosappliance_config_info{sha256="`,
		`sosappliance_drift_corrections_total`,
		`sosappliance_flow_mods_total 0`,
		`sosappliance_fallbacks_total 0`,
		`sosappliance_refusals_total{reason="identity"} 0`,
		`sosappliance_handshake_failures_total 0`,
		`sosappliance_handshakes_abandoned_total 0`,
		`sosappliance_session_memory_bytes{kind="reserved"} 0`,
		`sosappliance_frame_buffer_bytes{state="in_use"}`,
		`sosappliance_frame_buffer_bytes{state="free"}`,
		`sosappliance_frame_buffer_bytes{state="released"}`,
		`sosappliance_streams_lost_total 0`,
		`sosappliance_streams_replaced_total 0`,
		`sosappliance_reinjected_bytes_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}
