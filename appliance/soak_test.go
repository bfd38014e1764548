package appliance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Soak review (helper-95): config management rewrites sos.hcl every 30
// minutes for years, and monitoring scrapes and asks status all the
// while. Whatever one reload, drift check, status call, scrape or
// control-socket connection leaks adds up. Each test runs a real daemon
// in a fresh network namespace (a child process of its own, so nothing
// else counts), repeats one kind of cycle, and compares the process's
// descriptors, threads and goroutines after 100 cycles with the count
// after 20 warm-up cycles.

const (
	soakWarm   = 20
	soakCycles = 100
	// soakSlack is growth that is not per cycle: a lazily started
	// pool, a scrape's keep-alive connection still closing.
	soakSlack = 20
)

type soakSample struct {
	fds, threads, goroutines int
	heap                     uint64
}

func soakMeasure(t *testing.T) soakSample {
	t.Helper()
	// Let goroutines that are on their way out finish, and connections
	// closed by a peer be reaped, before counting.
	var s soakSample
	for range 5 {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	testsupport.RequireNoError(t, err)
	s.fds = len(ents)
	b, err := os.ReadFile("/proc/self/status")
	testsupport.RequireNoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			fmt.Sscan(strings.TrimSpace(v), &s.threads)
		}
	}
	s.goroutines = runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap = ms.HeapAlloc
	return s
}

// soak runs cycle soakWarm times, measures, runs it soakCycles
// more times, measures again, and fails on growth beyond the slack.
func soak(t *testing.T, what string, cycle func(i int)) {
	t.Helper()
	for i := range soakWarm {
		cycle(i)
	}
	before := soakMeasure(t)
	for i := soakWarm; i < soakWarm+soakCycles; i++ {
		cycle(i)
		if t.Failed() {
			t.FailNow()
		}
	}
	after := soakMeasure(t)
	t.Logf("%s: after %d warm-up cycles fds=%d threads=%d goroutines=%d heap=%dKiB; after %d more fds=%d threads=%d goroutines=%d heap=%dKiB",
		what, soakWarm, before.fds, before.threads, before.goroutines, before.heap>>10,
		soakCycles, after.fds, after.threads, after.goroutines, after.heap>>10)
	if d := after.fds - before.fds; d > soakSlack {
		t.Errorf("%s: %d more open descriptors after %d cycles (%d -> %d)", what, d, soakCycles, before.fds, after.fds)
		if t.Failed() {
			soakFdKinds(t)
		}
	}
	if d := after.goroutines - before.goroutines; d > soakSlack {
		t.Errorf("%s: %d more goroutines after %d cycles (%d -> %d)", what, d, soakCycles, before.goroutines, after.goroutines)
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Logf("goroutines (first 20 KiB):\n%s", soakHead(string(buf[:n]), 20<<10))
	}
	if d := after.threads - before.threads; d > soakSlack {
		t.Errorf("%s: %d more threads after %d cycles (%d -> %d)", what, d, soakCycles, before.threads, after.threads)
	}
	// Heap: only a gross per-cycle growth (over 64 KiB a cycle).
	if after.heap > before.heap && after.heap-before.heap > 64<<10*soakCycles {
		t.Errorf("%s: heap grew by %d KiB over %d cycles", what, (after.heap-before.heap)>>10, soakCycles)
	}
}

func soakHead(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func soakFdKinds(t *testing.T) {
	ents, _ := os.ReadDir("/proc/self/fd")
	kinds := map[string]int{}
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if i := strings.Index(l, ":["); i > 0 {
			l = l[:i]
		}
		kinds[l]++
	}
	t.Logf("open descriptors by target: %v", kinds)
}

func soakHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// soakNode is reloadNode's daemon with a short drift interval when
// asked, and metrics on loopback.
type soakNode struct {
	*reloadNode
	d       *Daemon
	metrics string
	socket  string
}

func newSoakNode(t *testing.T, cfg func(*reloadNode) string, drift time.Duration) *soakNode {
	t.Helper()
	n := &soakNode{reloadNode: newReloadNode(t), metrics: "127.0.0.1:9095"}
	n.socket = filepath.Join(n.dir, "control.sock")
	writeFile(t, n.cfgPath, cfg(n.reloadNode))
	if drift == 0 {
		drift = time.Hour
	}
	m := n.metrics
	d, err := NewDaemon(Options{
		ConfigPath: n.cfgPath, Node: "host1", StatePath: filepath.Join(n.dir, "state.db"),
		ControlSocket: n.socket, MetricsListen: &m, Root: n.root,
		Executors: n.daemonExecutors(), Settle: 20 * time.Millisecond, DriftInterval: drift,
		Logger: slog.New(slog.NewTextHandler(n.logs, nil)),
	})
	testsupport.RequireNoError(t, err)
	n.d = d
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "start-up", func() bool { return d.Status().Serial >= 1 })
	return n
}

// replace writes content over the config with a rename, as config
// management does, and waits for the daemon to have taken (ok) or
// refused (failed) it.
func (n *soakNode) replace(content string, wantOK bool) {
	n.t.Helper()
	tmp := n.cfgPath + ".new"
	writeFile(n.t, tmp, content)
	before := n.d.Status()
	testsupport.RequireNoError(n.t, os.Rename(tmp, n.cfgPath))
	hash := soakHash(content)
	testsupport.Eventually(n.t, 15*time.Second, "reload of the new file", func() bool {
		st := n.d.Status()
		if st.LastReload == nil {
			return false
		}
		if wantOK {
			return st.LastReload.Hash == hash && st.Reloads > before.Reloads && st.ConfigHash == hash
		}
		return st.ReloadFails > before.ReloadFails
	})
}

// soakMoved is cfg with the block that begins with on (on host1) moved
// to host2.
func soakMoved(t *testing.T, cfg, on string) string {
	t.Helper()
	if !strings.Contains(cfg, on) {
		t.Fatalf("config has no %q:\n%s", on, cfg)
	}
	return strings.Replace(cfg, on, strings.Replace(on, `"host1"`, `"host2"`, 1), 1)
}

// soakOnOff reloads the node between with and without, each cycle
// checking that addr listens with it and not without it.
func soakOnOff(t *testing.T, sn *soakNode, what, with, without, addr string) {
	t.Helper()
	soak(t, what+" on and off", func(i int) {
		if i%2 == 0 {
			sn.replace(without, true)
			if listens(addr) {
				t.Errorf("cycle %d: %s still listens on %s without its block", i, what, addr)
			}
		} else {
			sn.replace(with, true)
			testsupport.Eventually(t, 15*time.Second, what+" back", func() bool { return listens(addr) })
		}
	})
}

// TestSoakReloadRelayAddedAndRemoved: 100 reloads that alternate
// between a config with the node's relay and one with agent a1 on
// another node (host1 then runs only the controller).
func TestSoakReloadRelayAddedAndRemoved(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	with := soakBase(sn.reloadNode)
	soakOnOff(t, sn, "the relay", with, soakMoved(t, with, "node        = \"host1\"\n    switch      = \"sa\""), "10.1.0.2:9877")
}

// TestSoakReloadControllerMoved: 100 reloads that move the
// controller's listener between two ports (a new controller each time).
func TestSoakReloadControllerMoved(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	cfgs := []string{
		sn.config(reloadEdit{rmemMax: "100000", controllerPort: 6753, dataPort: 9877}),
		sn.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}),
	}
	soak(t, "controller moved", func(i int) { sn.replace(cfgs[i%2], true) })
}

// TestSoakReloadEditedInPlace: 100 reloads that change only a
// sysctl value (relay and controller updated in place).
func TestSoakReloadEditedInPlace(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	soak(t, "edited in place", func(i int) {
		sn.replace(sn.config(reloadEdit{rmemMax: fmt.Sprint(200000 + i%2), controllerPort: 6653, dataPort: 9877}), true)
	})
}

// TestSoakReloadRefused: 100 cycles of a refused file (a syntax
// error, a config the relay refuses, a controller port taken) and the
// good file again.
func TestSoakReloadRefused(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	taken, err := net.Listen("tcp", "127.0.0.1:6753")
	testsupport.RequireNoError(t, err)
	defer taken.Close()
	good := []string{
		sn.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}),
		sn.config(reloadEdit{rmemMax: "100001", controllerPort: 6653, dataPort: 9877}),
	}
	bad := []string{
		good[0] + "\nwhitelist \"w\" { server = \"nope\" }\n",
		sn.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877, tuningExtra: `congestion_control = "sosnosuchcc"`}),
		sn.config(reloadEdit{rmemMax: "100000", controllerPort: 6753, dataPort: 9877}),
	}
	soak(t, "refused and good again", func(i int) {
		sn.replace(bad[i%3], false)
		sn.replace(good[i%2], true)
	})
}

// TestSoakDriftChecks: 100 drift checks, each correcting a sysctl
// changed behind the daemon's back.
func TestSoakDriftChecks(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 10*time.Millisecond)
	file := filepath.Join(sn.root, "proc/sys/net/core/rmem_max")
	soak(t, "drift checks", func(i int) {
		before := sn.d.Status().Drift.Corrections
		writeFile(t, file, "1\n")
		testsupport.Eventually(t, 15*time.Second, "drift corrected", func() bool {
			return sn.d.Status().Drift.Corrections > before
		})
	})
}

// TestSoakStatusScrapesAndBadClients: 100 cycles of status and
// a flow plan over the control socket (on connections the client closes:
// FetchStatus's own keep-alive connections are
// TestStatusWatchHoldsNoConnections in cmd/sosappliance),
// a metrics scrape, and control-socket clients that send garbage, hang
// up mid-request, or connect and leave without a word.
func TestSoakStatusScrapesAndBadClients(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	control := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sn.socket)
		},
	}}
	metrics := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(c *http.Client, method, url, body string) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		testsupport.RequireNoError(t, err)
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, url, err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s: %s", method, url, resp.Status)
		}
	}
	dial := func() net.Conn {
		c, err := net.Dial("unix", sn.socket)
		testsupport.RequireNoError(t, err)
		return c
	}
	soak(t, "status, flow plans, scrapes and bad clients", func(i int) {
		get(control, http.MethodGet, "http://sosappliance/v1/status", "")
		get(control, http.MethodPost, "http://sosappliance/v1/flows/plan", "[]")
		get(metrics, http.MethodGet, "http://"+sn.metrics+"/metrics", "")
		c := dial()
		c.Write([]byte("\x00\x01garbage\r\n\r\n"))
		c.Close()
		c = dial()
		c.Write([]byte("GET /v1/status HTTP/1.1\r\nHost: x\r\nContent-"))
		c.Close()
		dial().Close()
		c = dial()
		// Half-close: the body ends short.
		c.Write([]byte("POST /v1/flows/plan HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n[{"))
		c.(*net.UnixConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c)
		c.Close()
		// A scrape that hangs up mid-request.
		if m, err := net.Dial("tcp", sn.metrics); err == nil {
			m.Write([]byte("GET /metrics HTTP/1.1\r\nHo"))
			m.Close()
		}
	})
}

func soakBase(n *reloadNode) string {
	return n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
}

// TestSoakTLSRotated: 100 reloads of a TLS controller whose
// certificate, key and switch CA were replaced in place (alternating
// between two CAs): SIGHUP without an edit on odd cycles, an edited file
// on even ones.
func TestSoakTLSRotated(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	pkiDir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(pkiDir, "ctl-cert.pem"), filepath.Join(pkiDir, "ctl-key.pem"), filepath.Join(pkiDir, "ca.pem")
	type set struct{ cert, key, ca []byte }
	var sets []set
	for _, name := range []string{"ca-one", "ca-two"} {
		ca := testsupport.NewPKI(t, t.TempDir(), name)
		cert, key, _ := ca.Issue(t, "controller")
		var s set
		for src, dst := range map[string]*[]byte{cert: &s.cert, key: &s.key, ca.CAFile: &s.ca} {
			b, err := os.ReadFile(src)
			testsupport.RequireNoError(t, err)
			*dst = b
		}
		sets = append(sets, s)
	}
	install := func(s set) {
		for dst, b := range map[string][]byte{certFile: s.cert, keyFile: s.key, caFile: s.ca} {
			testsupport.RequireNoError(t, os.WriteFile(dst, b, 0o600))
		}
	}
	install(sets[0])
	withTLS := func(n *reloadNode) string {
		return strings.Replace(soakBase(n), "controller {",
			fmt.Sprintf("controller {\n  tls {\n    cert_file = %q\n    key_file  = %q\n    ca_file   = %q\n  }", certFile, keyFile, caFile), 1)
	}
	sn := newSoakNode(t, withTLS, 0)
	cfg := withTLS(sn.reloadNode)
	soak(t, "TLS rotated", func(i int) {
		install(sets[(i+1)%2])
		if i%2 == 0 {
			sn.replace(cfg+fmt.Sprintf("\n# edit %d\n", i), true)
			return
		}
		before := sn.d.Status().Reloads
		testsupport.RequireNoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
		testsupport.Eventually(t, 15*time.Second, "SIGHUP reload", func() bool {
			st := sn.d.Status()
			return st.Reloads > before && st.LastReload != nil && strings.HasPrefix(st.LastReload.Result, "unchanged")
		})
	})
}

// TestSoakReloadControllerOnOff: 100 reloads that alternate
// between the controller on this node and on another (a config needs a
// controller block once it declares switches).
func TestSoakReloadControllerOnOff(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	with := soakBase(sn.reloadNode)
	soakOnOff(t, sn, "the controller", with, soakMoved(t, with, "controller {\n  node   = \"host1\""), "127.0.0.1:6653")
}

// TestSoakReloadHealthListenMoved: 100 reloads that move the
// relay's health listener between its default port and another.
func TestSoakReloadHealthListenMoved(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	cfgs := []string{
		sn.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877, agentExtra: `health_listen = "10.1.0.2:9979"`}),
		soakBase(sn.reloadNode),
	}
	soak(t, "health listener moved", func(i int) {
		sn.replace(cfgs[i%2], true)
		want := []string{"10.1.0.2:9979", "10.1.0.2:9878"}[i%2]
		testsupport.Eventually(t, 15*time.Second, "health on "+want, func() bool { return listens(want) })
	})
}

// TestSoakControllerMovedWithSwitch: 100 reloads that move the
// controller between two ports while a switch (an OpenFlow hello over
// TCP, as datapath 0a:01 would send first) is connected to it: the old
// controller's switch connections go with it.
func TestSoakControllerMovedWithSwitch(t *testing.T) {
	t.Parallel() // counts in a child process of its own
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	sn := newSoakNode(t, soakBase, 0)
	ports := []int{6753, 6653}
	var sw net.Conn
	defer func() {
		if sw != nil {
			sw.Close()
		}
	}()
	soak(t, "controller moved with a switch connected", func(i int) {
		sn.replace(sn.config(reloadEdit{rmemMax: "100000", controllerPort: ports[i%2], dataPort: 9877}), true)
		if sw != nil {
			// The old controller hung up on it.
			sw.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, sw)
			sw.Close()
			sw = nil
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[i%2]), 5*time.Second)
		testsupport.RequireNoError(t, err)
		sw = c
		sw.Write([]byte{4, 0, 0, 8, 0, 0, 0, 1})
		hdr := make([]byte, 8)
		sw.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(sw, hdr); err != nil || hdr[0] != 4 {
			t.Errorf("cycle %d: no hello from the controller: %v %x", i, err, hdr)
		}
	})
}
