package appliance

// The daemon when its state directory's filesystem is full, made for
// real: a small tmpfs in a private mount namespace (and a fresh network
// namespace) of a child test process.
//
// Found and written by review (helper-92).

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestDaemonRestartsOnAFullStateDisk: the daemon ran its relay a1 (a
// server side, which records the sessions it founds in founded-a1 beside
// the state), founded a session a minute ago, and is restarted (an
// upgrade, a crash, systemctl restart) while the state filesystem is
// full. The host is converged and the state database opens; but the
// relay's Start must rewrite its founded file as a new generation first,
// which a full disk refuses, so the whole daemon exits 1 and no relay
// serves until an operator frees space, where a running daemon facing
// the same disk only logs that it cannot record a session. Run returned
// "relay a1: relay: founded sessions file: write .../founded-a1.new: no
// space left on device"; now the relay starts.
func TestDaemonRestartsOnAFullStateDisk(t *testing.T) {
	if !testsupport.InPrivateMountsAndNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	if err := syscall.Mount("tmpfs", n.dir, "tmpfs", 0, "size=512k,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(n.dir, syscall.MNT_DETACH) })
	writeFile(t, n.psk, strings.Repeat("5a", 32)+"\n")
	testsupport.RequireNoError(t, os.Chmod(n.psk, 0o600))
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}))

	first := n.daemon()
	stop := runDaemonUntil(t, first, n.logs, nil)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool {
		return first.Status().Serial == 1 && listens("10.1.0.2:9877")
	})
	stop()
	founded := FoundedFile(filepath.Join(n.dir, "state.db"), "a1")
	id := make([]byte, 16)
	for i := range id {
		id[i] = byte(0x92 + i)
	}
	line := fmt.Sprintf("%s %d\n", hex.EncodeToString(id), time.Now().Add(-time.Minute).UnixNano())
	f, err := os.OpenFile(founded, os.O_WRONLY|os.O_APPEND, 0)
	testsupport.RequireNoError(t, err)
	_, err = f.WriteString(line)
	testsupport.RequireNoError(t, err)
	f.Close()

	free := testsupport.FillFS(t, n.dir, 0)
	defer free()
	mark := len(n.logs.String())
	second := n.daemon()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- second.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	up := testsupport.Poll(15*time.Second, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		return listens("10.1.0.2:9877")
	})
	select {
	case err := <-done:
		done <- err
		t.Errorf("the daemon restarted on a full state disk (nothing on the host to change) exited: %v; no relay serves", err)
	default:
		if !up {
			t.Errorf("the daemon restarted on a full state disk does not serve relay a1 within 15s")
		}
	}
	t.Logf("daemon log since the restart:\n%s", n.logs.String()[mark:])
}

// TestReloadOnAFullStateDisk: the config (kept elsewhere) is edited
// while the state filesystem is full but for a few pages: the edit adds
// 60 sysctls and moves the relay's data port. However far the reload's
// host apply gets before it runs out of room, the reload fails saying so
// with the state file and the full disk; the relay keeps serving on its
// old listener and the new one is closed again; and once the room is
// back, the drift check puts back whatever items the failed reload had
// changed (its own unwind could not record), so the host matches the
// config that runs. The next edit's reload then goes through.
func TestReloadOnAFullStateDisk(t *testing.T) {
	if !testsupport.InPrivateMountsAndNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	n.cfgPath = filepath.Join(t.TempDir(), "sos.hcl")
	if err := syscall.Mount("tmpfs", n.dir, "tmpfs", 0, "size=512k,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(n.dir, syscall.MNT_DETACH) })
	writeFile(t, n.psk, strings.Repeat("5a", 32)+"\n")
	testsupport.RequireNoError(t, os.Chmod(n.psk, 0o600))
	const ifaces = 60
	tree := map[string]string{}
	extra := ""
	for i := range ifaces {
		tree[fmt.Sprintf("proc/sys/net/ipv4/conf/rv92x%02d/rp_filter", i)] = "1\n"
		extra += fmt.Sprintf(`, "net.ipv4.conf.rv92x%02d.rp_filter" = "2"`, i)
	}
	// The edit: rmem_max and 60 more sysctls, and the relay's data port.
	edited := strings.Replace(n.config(reloadEdit{rmemMax: "200000", controllerPort: 6653, dataPort: 9879}),
		`"net.core.rmem_max" = "200000"`, `"net.core.rmem_max" = "200000"`+extra, 1)
	testsupport.WriteTree(t, n.root, tree)
	changed := func() int {
		c := 0
		for i := range ifaces {
			b, _ := os.ReadFile(filepath.Join(n.root, fmt.Sprintf("proc/sys/net/ipv4/conf/rv92x%02d/rp_filter", i)))
			if strings.TrimSpace(string(b)) != "1" {
				c++
			}
		}
		return c
	}
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}))
	off := ""
	d, err := NewDaemon(Options{
		ConfigPath: n.cfgPath, Node: "host1", StatePath: filepath.Join(n.dir, "state.db"),
		ControlSocket: filepath.Join(n.dir, "control.sock"), MetricsListen: &off, Root: n.root,
		Executors: n.daemonExecutors(), Settle: 50 * time.Millisecond, DriftInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(n.logs, nil)),
	})
	testsupport.RequireNoError(t, err)
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool {
		return d.Status().Serial == 1 && listens("10.1.0.2:9877")
	})
	before := n.hostItems()
	free := testsupport.FillFS(t, n.dir, 4)
	state := filepath.Join(n.dir, "state.db")
	writeFile(t, n.cfgPath, edited)
	var st Status
	testsupport.Eventually(t, 15*time.Second, "the reload's outcome", func() bool {
		st = d.Status()
		return st.LastReload != nil
	})
	t.Logf("reload: %s; %d of %d new items on the host", st.LastReload.Result, changed(), ifaces)
	if st.LastReload.Result == "ok" {
		t.Fatalf("the reload went through: the test did not fill the disk enough")
	}
	if !strings.Contains(st.LastReload.Result, state) || !strings.Contains(st.LastReload.Result, "no space left on device") {
		t.Errorf("the failed reload does not name the state file %s and the full disk: %s", state, st.LastReload.Result)
	}
	if !listens("10.1.0.2:9877") || listens("10.1.0.2:9879") {
		t.Errorf("after the failed reload: old listener serves %v, new one %v", listens("10.1.0.2:9877"), listens("10.1.0.2:9879"))
	}
	free()
	testsupport.Eventually(t, 15*time.Second, "the host back to the running config once the room is back", func() bool {
		return n.hostItems() == before && changed() == 0
	})
	writeFile(t, n.cfgPath, edited+"# again\n")
	testsupport.Eventually(t, 15*time.Second, "the reload once the room is back", func() bool {
		st := d.Status()
		return st.LastReload != nil && st.LastReload.Result == "ok" && listens("10.1.0.2:9879") && changed() == ifaces
	})
}
