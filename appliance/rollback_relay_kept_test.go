package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// portTaker is the sysctl executor of a node on which another process
// takes a port the moment the relay left it: applying value of key, it
// listens on addr (the relay's old data port, free since the relay took
// the new one) and then fails, so the reload unwinds.
type portTaker struct {
	tuning.Executor
	key, value, addr string

	mu sync.Mutex
	ln net.Listener
}

func (p *portTaker) Apply(ctx context.Context, it item.Item) error {
	if it.Key != p.key || it.Value != p.value {
		return p.Executor.Apply(ctx, it)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("the test could not take %s: %w", p.addr, err)
		}
		p.ln = ln
	}
	return errors.New("injected: the host step fails after the relays switched")
}

func (p *portTaker) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
}

// TestFailedReloadWithARelayThatCannotGoBack: a reload moves agent a1's
// data port and PSK, and then fails at the host step; meanwhile another
// process took the port a1 left, so a1 cannot take its last good config
// back and keeps the new one. The failed reload says so (not "still
// running the last good config"), status shows the PSK a1 holds, and the
// next reload of the last good file switches a1 back to it. Before, the
// daemon's record kept the old config: status showed the old PSK, and the
// reload of the old file found it unedited ("unchanged") and left a1 on
// the failed reload's port and key until a restart. A reload that fails
// meanwhile says that a1 still runs the config of the earlier one, and
// the drift check keeps trying the last good config until it is taken.
func TestFailedReloadWithARelayThatCannotGoBack(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	good := n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
	writeFile(t, n.cfgPath, good)
	oldPSK, err := LoadPSK(n.psk)
	testsupport.RequireNoError(t, err)

	execs := tempHostExecutors(n.root)
	execs[item.KindSteering] = tuning.NewSteering()
	taker := &portTaker{Executor: execs[item.KindSysctl], key: "net.core.rmem_max", value: "200000", addr: "10.1.0.2:9877"}
	t.Cleanup(taker.release)
	execs[item.KindSysctl] = taker
	off := ""
	d, err := NewDaemon(Options{
		ConfigPath: n.cfgPath, Node: "host1", StatePath: filepath.Join(n.dir, "state.db"),
		ControlSocket: filepath.Join(n.dir, "control.sock"), MetricsListen: &off, Root: n.root,
		Executors: execs, Settle: 50 * time.Millisecond, DriftInterval: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(n.logs, nil)),
	})
	testsupport.RequireNoError(t, err)
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool {
		return d.Status().Serial == 1 && listens("10.1.0.2:9877")
	})
	before := n.hostItems()

	// The edit: another data port and another PSK file.
	oldPSKPath := n.psk
	n.psk = filepath.Join(n.dir, "psk-next")
	writeFile(t, n.psk, strings.Repeat("6b", 32)+"\n")
	testsupport.RequireNoError(t, os.Chmod(n.psk, 0o600))
	newPSK, err := LoadPSK(n.psk)
	testsupport.RequireNoError(t, err)
	writeFile(t, n.cfgPath, n.config(reloadEdit{rmemMax: "200000", controllerPort: 6653, dataPort: 9977}))
	var st Status
	testsupport.Eventually(t, 15*time.Second, "the reload that fails at the host step", func() bool {
		st = d.Status()
		return st.LastReload != nil && strings.Contains(st.LastReload.Result, "injected")
	})
	t.Logf("failed reload: %s", st.LastReload.Result)
	if strings.Contains(st.LastReload.Result, "still running the last good config") ||
		!strings.Contains(st.LastReload.Result, "relay a1") || !strings.Contains(st.LastReload.Result, "address already in use") {
		t.Errorf("the failed reload says %q, want that relay a1 could not go back (address already in use) and runs the new config", st.LastReload.Result)
	}
	if want := []string{PSKID(newPSK)}; !slices.Equal(st.PSKIDs, want) {
		t.Errorf("status shows PSK ids %v, want %v: the one a1 holds", st.PSKIDs, want)
	}
	if !listens("10.1.0.2:9977") {
		t.Error("a1 does not listen on the new data port it kept")
	}
	if after := n.hostItems(); after != before {
		t.Errorf("host items changed:\n%s\nwere\n%s", after, before)
	}
	// What the node publishes to the cluster, where status --cluster
	// compares the nodes' PSKs (found by review).
	if got, want := d.publishedStatus().PSKIDs, []string{PSKID(newPSK)}; !slices.Equal(got, want) {
		t.Errorf("published PSK ids %v, want %v (local status says %v)", got, want, st.PSKIDs)
	}

	// The operator writes the last good file back, byte for byte, while
	// the port is still taken: that reload fails too, and must not say
	// that the last good config runs (found by review).
	n.psk = oldPSKPath
	writeFile(t, n.cfgPath, good)
	testsupport.Eventually(t, 15*time.Second, "the reload of the last good file, failing", func() bool {
		st = d.Status()
		return st.LastReload != nil && !strings.Contains(st.LastReload.Result, "injected") && strings.Contains(st.LastReload.Result, "address already in use")
	})
	t.Logf("the next failed reload: %s", st.LastReload.Result)
	if strings.Contains(st.LastReload.Result, "still running the last good config") ||
		!strings.Contains(st.LastReload.Result, "relay a1 still runs the config of an earlier reload that failed") {
		t.Errorf("a1 still runs the failed reload's config, but the next failed reload says %q", st.LastReload.Result)
	}

	// The port is free again: the next drift check switches a1 back, as
	// a reload of the same file (SIGHUP, `systemctl reload`) would.
	taker.release()
	testsupport.Eventually(t, 15*time.Second, "the drift check switching a1 back", func() bool {
		st = d.Status()
		return st.LastReload != nil && !strings.HasPrefix(st.LastReload.Result, "failed")
	})
	if st.LastReload.Result != "ok" {
		t.Errorf("the reload of the last good file says %q, want ok (a switch, not unchanged)", st.LastReload.Result)
	}
	if !listens("10.1.0.2:9877") || listens("10.1.0.2:9977") {
		t.Errorf("a1 listens on 9877 %v and 9977 %v, want the last good port only", listens("10.1.0.2:9877"), listens("10.1.0.2:9977"))
	}
	if want := []string{PSKID(oldPSK)}; !slices.Equal(d.Status().PSKIDs, want) {
		t.Errorf("status shows PSK ids %v after switching back, want %v", d.Status().PSKIDs, want)
	}
}
