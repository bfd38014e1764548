// End-to-end tests of the whole appliance in the one-machine lab: real
// sosappliance controller and agents, Open vSwitch, the WAN emulator, and
// unmodified iperf3 and curl at the ends.
package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/measure"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The acceptance bars for sosappliance in the lab.
const (
	barOfLink     = 0.80
	barOfParallel = 0.90
	barOfDirect   = 4.0
)

const (
	iperfPort  = 5201 // whitelist "iperf" of sos.hcl
	directPort = 5301 // no whitelist
	httpPort   = 8080 // whitelist "http" of sos.hcl
	bigSize    = 1 << 30
	upSize     = 256 << 20
)

// requireE2E skips when the lab cannot run here, except under CI=true,
// where a missing prerequisite fails the test: CI must never pass by
// skipping the real thing.
func requireE2E(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end lab test; not in -short")
	}
	err := labnet.CheckPrerequisites(labnet.Options{Wanem: "/bin/true"})
	var missing []string
	if err != nil {
		missing = append(missing, err.Error())
	}
	missing = append(missing, testsupport.MissingBinaries("iperf3", "curl", "ss", "go")...)
	testsupport.Require(t, len(missing) == 0, "missing %s", strings.Join(missing, "; "))
}

// buildBinaries builds the programs the lab runs as separate processes.
func buildBinaries(t *testing.T) (sosappliance, wanem string) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/",
		"github.com/sosappliance/sosappliance/cmd/sosappliance",
		"github.com/sosappliance/sosappliance/examples/lab/cmd/wanem").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "sosappliance"), filepath.Join(dir, "wanem")
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestLab brings the lab up once, with the demo's WAN, and checks the
// issue's acceptance criteria against it.
func TestLab(t *testing.T) {
	requireE2E(t)
	sos, wanem := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	lab := upLab(ctx, t, labnet.Options{Config: "sos.hcl", Sosappliance: sos, Wanem: wanem, WAN: labnet.DefaultWAN})
	files := newFileServer(t)
	serveFilesOn(t, lab, labnet.Server, netip.AddrPortFrom(labnet.ServerAddr, httpPort), files)
	if _, err := measure.Server(ctx, lab, iperfPort, directPort); err != nil {
		t.Fatal(err)
	}

	t.Run("Throughput", func(t *testing.T) { testThroughput(ctx, t, lab) })
	t.Run("Download1GiB", func(t *testing.T) { testDownload(ctx, t, lab, files) })
	serveFilesOn(t, lab, labnet.Server, netip.AddrPortFrom(labnet.ServerAddr, rangePort), files)
	t.Run("DownloadRangePort", func(t *testing.T) {
		testRangePortDownload(ctx, t, lab, files, labnet.ClientAddr, labnet.ServerAddr, rangePort)
	})
	serveFilesOn(t, lab, labnet.Server, netip.AddrPortFrom(labnet.ServerAddr6, http6Port), files)
	t.Run("DownloadIPv6", func(t *testing.T) {
		testRangePortDownload(ctx, t, lab, files, labnet.ClientAddr6, labnet.ServerAddr6, http6Port)
	})
	t.Run("DownloadSurvivesStreamKills", func(t *testing.T) { testDownloadSurvivesStreamKills(ctx, t, lab, files) })
	t.Run("Upload", func(t *testing.T) { testUpload(ctx, t, lab, files) })
	t.Run("FailOpen", func(t *testing.T) { testFailOpen(ctx, t, lab, files) })
	t.Run("WhitelistReload", func(t *testing.T) { testWhitelistReload(ctx, t, lab, files) })
}

// testThroughput runs the demo's three transfers, short. The bars
// (share of the link, of end-host parallel, multiple of direct) are
// performance figures: they are logged here with their ratios and checked
// by `lab demo --check`, not asserted, because a small shared machine swings
// them by half. What is asserted is that acceleration engages and helps: the
// whitelisted transfer beats one direct connection in the better of two
// rounds.
func testThroughput(ctx context.Context, t *testing.T, lab *labnet.Lab) {
	link := float64(lab.WAN().Rate)
	best := 0.0
	for round := 1; round <= 2; round++ {
		run := func(tr measure.Transfer) float64 {
			tr.Duration, tr.Omit = 10*time.Second, 3*time.Second
			res, err := measure.Run(ctx, lab, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			return res.ReceivedBps
		}
		direct := run(measure.Transfer{Label: "direct", Port: directPort, Parallel: 1})
		parallel := run(measure.Transfer{Label: "parallel", Port: directPort, Parallel: 64})
		sos := run(measure.Transfer{Label: "sosappliance", Port: iperfPort, Parallel: 1})
		var misses []string
		if sos < barOfLink*link {
			misses = append(misses, fmt.Sprintf("%.0f%% of the link rate, bar %.0f%%", 100*sos/link, 100*barOfLink))
		}
		if sos < barOfParallel*parallel {
			misses = append(misses, fmt.Sprintf("%.2f× end-host parallel, bar %.1f×", sos/parallel, barOfParallel))
		}
		if sos < barOfDirect*direct {
			misses = append(misses, fmt.Sprintf("%.1f× direct, bar %.0f×", sos/direct, barOfDirect))
		}
		verdict := "all bars met"
		if len(misses) > 0 {
			verdict = "bars missed: " + strings.Join(misses, "; ")
		}
		t.Logf("round %d over %s: direct %s, iperf3 -P 64 %s, sosappliance %s: %.0f%% of link, %.2f× parallel, %.1f× direct (%s)",
			round, lab.WAN(), labnet.FormatRate(direct), labnet.FormatRate(parallel), labnet.FormatRate(sos),
			100*sos/link, sos/parallel, sos/direct, verdict)
		if direct > 0 {
			best = max(best, sos/direct)
		}
		if len(misses) == 0 {
			return
		}
	}
	if best <= 1 {
		t.Errorf("sosappliance did not beat one direct connection (best %.2f× direct)", best)
	}
}

// testDownload fetches a 1 GiB file with curl through the agents and
// compares its SHA-256; the server must see the client's own address, and
// the agents must be carrying the connection while it runs.
func testDownload(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer) {
	d := startDownload(ctx, t, lab, labnet.Client, files, "-o", "-", fmt.Sprintf("http://%s:%d/big", labnet.ServerAddr, httpPort))
	if d.remote.Addr() != labnet.ClientAddr {
		t.Errorf("server saw %s, want the client's address %s", d.remote, labnet.ClientAddr)
	}
	if err := carried(ctx, lab, d.remote, httpPort); err != nil {
		t.Errorf("download not carried by the agents: %v", err)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("curl: %v", err)
	}
	elapsed := time.Since(d.start)
	d.requireBig(t, files)
	t.Logf("1 GiB downloaded byte-identical in %.1f s (%s, slow start included)", elapsed.Seconds(), labnet.FormatRate(float64(bigSize)*8/elapsed.Seconds()))
}

// testUpload sends data the other way, client to server, with curl PUT;
// the server hashes what it received.
func testUpload(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer) {
	seen := files.watch("/upload")
	src := io.LimitReader(rand.NewChaCha8([32]byte{'u', 'p'}), upSize)
	sum := sha256.New()
	cmd := lab.Command(ctx, labnet.Client, "curl", "-sS", "--fail", "-T", "-", "-H", "Expect:",
		fmt.Sprintf("http://%s:%d/upload", labnet.ServerAddr, httpPort))
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = io.TeeReader(src, sum), &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case remote := <-seen:
		if remote.Addr() != labnet.ClientAddr {
			t.Errorf("server saw %s, want the client's address %s", remote, labnet.ClientAddr)
		}
		if err := carried(ctx, lab, remote, httpPort); err != nil {
			t.Errorf("upload not carried by the agents: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the server saw no upload within 30 s")
	}
	if err := <-done; err != nil {
		t.Fatalf("curl -T: %v: %s", err, stderr.String())
	}
	elapsed := time.Since(start)
	want := fmt.Sprintf("%d %s", upSize, hex.EncodeToString(sum.Sum(nil)))
	if got := strings.TrimSpace(stdout.String()); got != want {
		t.Fatalf("server received %q, want %q", got, want)
	}
	t.Logf("%d MiB uploaded byte-identical in %.1f s (%s)", upSize>>20, elapsed.Seconds(), labnet.FormatRate(float64(upSize)*8/elapsed.Seconds()))
}

// testFailOpen kills the client site's agent the hard way: new connections
// must go direct (slow, but working) once the controller has noticed, and
// be carried again once the agent is back.
func testFailOpen(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer) {
	agentA := lab.Nodes()[1]
	mustProbe(ctx, t, lab, files, true)
	if err := lab.KillNode(agentA.Name); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitSteered(ctx, t, lab, httpPort, false, 30*time.Second)
	t.Logf("controller withdrew the steering %.1f s after agent-a died", time.Since(killed).Seconds())
	mustProbe(ctx, t, lab, files, false)

	if err := lab.StartNode(agentA.Name); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitSteered(ctx, t, lab, httpPort, true, 60*time.Second)
	t.Logf("steering restored %.1f s after agent-a restarted", time.Since(restarted).Seconds())
	mustProbe(ctx, t, lab, files, true)
}

// testWhitelistReload removes the http whitelist from the lab's config and
// puts it back, with every daemon left running: connections to the port go
// direct, then are carried again.
func testWhitelistReload(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer) {
	pids := map[string]int{}
	for _, n := range lab.Nodes() {
		p := lab.Process(n.Name)
		if p == nil {
			t.Fatalf("%s is not running", n.Name)
		}
		pids[n.Name] = p.Ref.PID
	}
	var saved labnet.Whitelist
	for _, w := range lab.Config().Whitelists {
		if w.Name == "http" {
			saved = labnet.Whitelist{Name: w.Name, Server: w.Server.String(), ServerPort: int(w.ServerPort),
				Streams: w.Streams, ChunkSize: w.ChunkSize, QueueLength: w.QueueLength}
			for _, c := range w.Clients {
				saved.Clients = append(saved.Clients, c.String())
			}
		}
	}
	if saved.Name == "" {
		t.Fatal("the lab config has no http whitelist")
	}
	mustProbe(ctx, t, lab, files, true)

	if err := lab.EditConfig(func(c *labnet.ConfigFile) error {
		if !c.RemoveWhitelist("http") {
			return errors.New("no http whitelist")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitSteered(ctx, t, lab, httpPort, false, 30*time.Second)
	mustProbe(ctx, t, lab, files, false)
	if ok, err := lab.PortSteered(ctx, iperfPort); err != nil || !ok {
		t.Errorf("the iperf whitelist lost its steering too (%v)", err)
	}

	if err := lab.EditConfig(func(c *labnet.ConfigFile) error { c.SetWhitelist(saved); return nil }); err != nil {
		t.Fatal(err)
	}
	waitSteered(ctx, t, lab, httpPort, true, 30*time.Second)
	mustProbe(ctx, t, lab, files, true)

	for name, pid := range pids {
		if p := lab.Process(name); p == nil || p.Ref.PID != pid || !p.Ref.Alive() {
			t.Errorf("%s was restarted or stopped (pid %d before)", name, pid)
		}
	}
}

func waitSteered(ctx context.Context, t *testing.T, lab *labnet.Lab, port int, want bool, limit time.Duration) {
	t.Helper()
	var ok bool
	var err error
	if !testsupport.Poll(limit, func() bool {
		ok, err = lab.PortSteered(ctx, port)
		return err == nil && ok == want
	}) {
		flows, _ := lab.Ofctl(ctx, "dump-flows", lab.Bridges()[0])
		t.Fatalf("port %d steered=%v after %v, want %v (%v); br-a:\n%s", port, ok, limit, want, err, flows)
	}
}

// mustProbe opens a new connection from the client to the HTTP server,
// fetches a small object over it and checks its content, that the server
// saw the client's address, and whether the agents carried it.
func mustProbe(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer, wantCarried bool) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := lab.Dial(pctx, labnet.Client, "tcp", netip.AddrPortFrom(labnet.ServerAddr, httpPort).String())
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	defer conn.Close()
	dl, _ := pctx.Deadline()
	_ = conn.SetDeadline(dl)
	local := conn.LocalAddr().(*net.TCPAddr).AddrPort()
	fmt.Fprintf(conn, "GET /probe HTTP/1.1\r\nHost: lab\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("probe from %s: %v", local, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("probe from %s: %s %v", local, resp.Status, err)
	}
	if want := fmt.Sprintf("probe %s\n", netip.AddrPortFrom(local.Addr().Unmap(), local.Port())); string(body) != want {
		t.Fatalf("probe answer %q, want %q: the server must see the client's own address and port", body, want)
	}
	// The connection is still open (keep-alive), so the agents' sockets
	// for it are still there to be found.
	err = carried(ctx, lab, local, httpPort)
	if wantCarried && err != nil {
		t.Fatalf("probe from %s not carried by the agents: %v", local, err)
	}
	if !wantCarried && err == nil {
		t.Fatalf("probe from %s was carried by the agents; want direct", local)
	}
}

// carried checks that the agents hold the connection of client to the
// server's port: agent-a accepted it transparently (its local address is
// the server's), and agent-b opened its leg to the server from the client's
// own address.
func carried(ctx context.Context, lab *labnet.Lab, client netip.AddrPort, port int) error {
	return carriedTo(ctx, lab, client, netip.AddrPortFrom(labnet.ServerAddr, uint16(port)))
}

// carriedTo checks that the agents hold the two legs of a connection from
// client to server.
func carriedTo(ctx context.Context, lab *labnet.Lab, client, server netip.AddrPort) error {
	client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	checks := []struct {
		host        labnet.Host
		local, peer netip.AddrPort
	}{
		{labnet.AgentA, server, client},
		{labnet.AgentB, client, server},
	}
	for _, c := range checks {
		out, err := lab.Run(ctx, c.host, "ss", "-Htn")
		if err != nil {
			return err
		}
		if !hasSocket(out, c.local, c.peer) {
			return fmt.Errorf("%s has no socket %s -> %s:\n%s", c.host, c.local, c.peer, out)
		}
	}
	return nil
}

// hasSocket finds a socket from local to peer in ss output; an
// IPv4-mapped address (a dual-stack listener's) counts as the IPv4 one.
func hasSocket(ss string, local, peer netip.AddrPort) bool {
	unmap := func(s string) netip.AddrPort {
		a, _ := netip.ParseAddrPort(s)
		return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	}
	for _, line := range strings.Split(ss, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && unmap(f[3]) == local && unmap(f[4]) == peer {
			return true
		}
	}
	return false
}

// fileServer is the plain HTTP server at the server's site: a 1 GiB file,
// a small probe object that names the peer it saw, and an upload sink.
type fileServer struct {
	bigPath string
	bigSum  string

	mu       sync.Mutex
	watchers map[string]chan netip.AddrPort
}

func newFileServer(t *testing.T) *fileServer {
	t.Helper()
	f, err := os.CreateTemp("", "lab-big")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	sum := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, sum), 1<<20)
	if _, err := io.CopyN(w, rand.NewChaCha8([32]byte{'b', 'i', 'g'}), bigSize); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return &fileServer{bigPath: f.Name(), bigSum: hex.EncodeToString(sum.Sum(nil)), watchers: map[string]chan netip.AddrPort{}}
}

// watch returns a channel that receives the peer of the next request for
// path.
func (s *fileServer) watch(path string) <-chan netip.AddrPort {
	ch := make(chan netip.AddrPort, 1)
	s.mu.Lock()
	s.watchers[path] = ch
	s.mu.Unlock()
	return ch
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	s.mu.Lock()
	if ch, ok := s.watchers[r.URL.Path]; ok {
		delete(s.watchers, r.URL.Path)
		ch <- peer
	}
	s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/big":
		http.ServeFile(w, r, s.bigPath)
	case r.Method == http.MethodGet && r.URL.Path == "/probe":
		fmt.Fprintf(w, "probe %s\n", peer)
	case r.Method == http.MethodPut && r.URL.Path == "/upload":
		sum := sha256.New()
		n, err := io.Copy(sum, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %s\n", n, hex.EncodeToString(sum.Sum(nil)))
	default:
		http.NotFound(w, r)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
