package relay

import (
	"bufio"
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
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

func init() {
	helpers["agent"] = helper(helperAgent)
	helpers["http"] = helper(helperHTTP)
}

// helperAgent runs a real agent (TPROXY listener, transparent server
// connections) from the JSON Config in args[0]. It prints "ready" once
// listening, answers every stdin line "stats" with the Stats as JSON (and
// "pools" with its pools' PoolStats), and shuts down when stdin closes.
func helperAgent(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("agent: want one argument, the JSON config, not %d", len(args))
	}
	var cfg Config
	if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := New(cfg, log)
	if err != nil {
		return err
	}
	if err := a.Start(context.Background()); err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var v any
		switch in.Text() {
		case "stats":
			v = a.Stats()
		case "pools":
			v = a.Pools()
		default:
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.Shutdown(ctx)
}

const (
	httpFileSeed = 99
	httpFileSize = 48 << 20
)

// helperHTTP is a plain HTTP server on :80: GET /file serves a pattern
// file, PUT anything answers the sha256 of the body; it prints the remote
// address of every request.
func helperHTTP([]string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /file", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("remote", r.RemoteAddr)
		w.Header().Set("Content-Length", fmt.Sprint(httpFileSize))
		p := newPattern(httpFileSeed)
		_, _ = io.CopyN(w, p, httpFileSize)
	})
	mux.HandleFunc("PUT /", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("remote", r.RemoteAddr)
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%x", h.Sum(nil))
	})
	ln, err := net.Listen("tcp4", "0.0.0.0:80")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		_ = srv.Close()
	}()
	fmt.Println("ready")
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

// lab is the namespace topology of the real-network test:
//
//	client 10.10.1.1 -- 10.10.1.2 agentA 192.168.77.1 -- 192.168.77.2 agentB 10.10.2.2 -- 10.10.2.1 server
//
// Plain routes send the client's traffic for the server through agent A and
// the server's replies through agent B, so both agents see the packets at
// prerouting, as they do behind the switch's eth_dst rewrite.
type lab struct {
	cli, agA, agB, srv string
}

func (l *lab) all() []string { return []string{l.cli, l.agA, l.agB, l.srv} }

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newLab(t *testing.T) *lab {
	return newLabWith(t, "sosr", func(l *lab) {
		vethLink(t, l.agA, "w0", "192.168.77.1/30", l.agB, "w0", "192.168.77.2/30")
		sh(t, "ip", "-n", l.agA, "route", "add", "10.10.2.0/24", "via", "192.168.77.2")
		sh(t, "ip", "-n", l.agB, "route", "add", "10.10.1.0/24", "via", "192.168.77.1")
	})
}

// nsSeq numbers the namespaces of this test process (nsName).
var nsSeq atomic.Int64

// nsName names a network namespace for one test: prefix, the process
// and a number of its own, so that tests running in parallel, and the
// test processes of other packages, never share one.
func nsName(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), nsSeq.Add(1))
}

// newLabWith is the lab, its namespaces named from prefix, with the link
// between the agents and their routes over it made by wan.
func newLabWith(t *testing.T, prefix string, wan func(l *lab)) *lab {
	l := &lab{cli: nsName(prefix + "cli"), agA: nsName(prefix + "aga"), agB: nsName(prefix + "agb"), srv: nsName(prefix + "srv")}
	for _, ns := range l.all() {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	vethLink(t, l.cli, "c0", "10.10.1.1/24", l.agA, "a0", "10.10.1.2/24")
	vethLink(t, l.agB, "s0", "10.10.2.2/24", l.srv, "s0", "10.10.2.1/24")
	wan(l)
	sh(t, "ip", "-n", l.cli, "route", "add", "default", "via", "10.10.1.2")
	sh(t, "ip", "-n", l.srv, "route", "add", "default", "via", "10.10.2.2")
	for _, ns := range []string{l.agA, l.agB} {
		sh(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	}
	return l
}

// vethLink joins namespaces a and b by a veth pair with the addresses
// given.
func vethLink(t *testing.T, a, aIf, aAddr, b, bIf, bAddr string) {
	t.Helper()
	sh(t, "ip", "-n", a, "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b)
	sh(t, "ip", "-n", a, "addr", "add", aAddr, "dev", aIf)
	sh(t, "ip", "-n", b, "addr", "add", bAddr, "dev", bIf)
	sh(t, "ip", "-n", a, "link", "set", aIf, "up")
	sh(t, "ip", "-n", b, "link", "set", bIf, "up")
}

// steer applies the agent steering host state inside a namespace with the
// tuning package's executors, as `sosappliance apply` does on an agent.
func steer(t *testing.T, ns string, spec item.SteeringSpec) {
	t.Helper()
	items, err := spec.Items()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	exs := tuning.Executors("/")
	err = tuning.RunInNetns(h, func() error {
		for _, it := range items {
			if err := exs[it.Kind].Apply(context.Background(), it); err != nil {
				return fmt.Errorf("apply %s: %w", it.ID(), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// nsProcess is a helper or tool running inside a namespace.
type nsProcess struct {
	*testsupport.Daemon
	stdin io.WriteCloser
	lines chan string
}

// startInNetns runs the program name with args inside the namespace ns.
func startInNetns(t *testing.T, ns, name string, args ...string) *nsProcess {
	t.Helper()
	return watchInNetns(t, ns, name, exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...))
}

// startHelperInNetns runs this test binary as the helper role with args
// inside the namespace ns.
func startHelperInNetns(t *testing.T, ns, role string, args ...string) *nsProcess {
	t.Helper()
	return watchInNetns(t, ns, role, testsupport.CommandInNetns(t, ns, role, args...))
}

// watchInNetns starts cmd, which runs name inside ns, with a pipe to its
// stdin and its stdout line by line; when the test ends it stops it and
// logs its stderr.
func watchInNetns(t *testing.T, ns, name string, cmd *exec.Cmd) *nsProcess {
	t.Helper()
	stderr := &testsupport.LockedBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A pipe of our own rather than StdoutPipe: the daemon's Wait does not
	// close it under the reader, so no line the process wrote is lost.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	d := testsupport.StartDaemon(t, cmd)
	_ = w.Close()
	p := &nsProcess{Daemon: d, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		// Closing stdin stops an agent helper gracefully; SIGTERM (sent
		// to ip netns exec, which execs the program) stops the rest.
		_ = stdin.Close()
		select {
		case <-d.Done():
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-d.Done():
			if err := d.Err(); err != nil {
				t.Logf("%s in %s exited: %v", name, ns, err)
			}
		case <-time.After(10 * time.Second):
			d.Kill()
		}
		if s := stderr.String(); s != "" {
			t.Logf("%s in %s stderr:\n%s", name, ns, s)
		}
	})
	return p
}

// next returns the next stdout line.
func (p *nsProcess) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s: process ended", what)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: no output", what)
	}
	return ""
}

func startLabAgent(t *testing.T, ns string, cfg Config) *nsProcess {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := startHelperInNetns(t, ns, "agent", string(b))
	if l := p.next(t, "agent in "+ns); l != "ready" {
		t.Fatalf("agent in %s said %q", ns, l)
	}
	return p
}

func (p *nsProcess) stats(t *testing.T) Stats {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, "stats"); err != nil {
		t.Fatal(err)
	}
	var st Stats
	if err := json.Unmarshal([]byte(p.next(t, "stats")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestNetnsIperf3AndCurlThroughAgents runs the product path for real:
// client, two agents and server in network namespaces; steering host state
// applied by the tuning executors; agents with TPROXY and IP_TRANSPARENT;
// unmodified iperf3 and curl. The server must see the client's address.
func TestNetnsIperf3AndCurlThroughAgents(t *testing.T) {
	// Not parallel: its transfers saturate both cores, which the silence thresholds of the parallel tests would feel.
	testsupport.RequireRoot(t, "ip", "nft", "iperf3", "curl", "ss")
	l := newLab(t)
	client, server := netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("10.10.2.1")
	clients := []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24")}
	const tproxyPort, dataPort = 9876, 9877
	steer(t, l.agA, item.SteeringSpec{Interface: "a0", ListenPort: tproxyPort, Divert: []item.Divert{
		{Clients: clients, Server: server, Port: 5201},
		{Clients: clients, Server: server, Port: 80},
	}})
	steer(t, l.agB, item.SteeringSpec{})

	peer := netip.AddrPortFrom(netip.MustParseAddr("192.168.77.2"), dataPort)
	whitelist := []Whitelist{
		{Name: "iperf", Clients: clients, Server: server, Port: 5201, Streams: 16, ChunkSize: 60000, QueueLength: 5, Peer: peer, PeerName: "agent-b"},
		{Name: "http", Clients: clients, Server: server, Port: 80, Streams: 8, ChunkSize: 65536, QueueLength: 4, Peer: peer, PeerName: "agent-b"},
	}
	accept := slices.Clone(whitelist)
	for i := range accept {
		accept[i].Peer, accept[i].PeerName = netip.AddrPort{}, "agent-a"
	}
	health := netip.MustParseAddrPort("127.0.0.1:9878")
	agentA := startLabAgent(t, l.agA, Config{
		TransparentListen: netip.AddrPortFrom(netip.IPv4Unspecified(), tproxyPort),
		HealthListen:      health, PSK: testPSK, Name: "agent-a", Client: whitelist,
	})
	agentB := startLabAgent(t, l.agB, Config{
		DataListen:   netip.AddrPortFrom(netip.IPv4Unspecified(), dataPort),
		HealthListen: health, PSK: testPSK, Name: "agent-b", Server: accept,
	})
	for _, ns := range []string{l.agA, l.agB} {
		if out := sh(t, "ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "5", "http://"+health.String()+"/healthz"); out != "ok" {
			t.Fatalf("healthz in %s: %q", ns, out)
		}
	}

	t.Run("iperf3", func(t *testing.T) {
		for _, reverse := range []bool{false, true} {
			srv := startInNetns(t, l.srv, "iperf3", "-s", "-1", "-p", "5201")
			time.Sleep(300 * time.Millisecond) // iperf3 has no readiness signal
			args := []string{"netns", "exec", l.cli, "iperf3", "-c", server.String(), "-p", "5201", "-t", "3", "-J"}
			if reverse {
				args = append(args, "-R")
			}
			cmd := exec.Command("ip", args...)
			var out bytes.Buffer
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// While data flows, the server's sockets must have the
			// client's own address as their peer.
			var peers string
			testsupport.Eventually(t, 30*time.Second, "iperf3 connections at the server", func() bool {
				peers = sh(t, "ip", "netns", "exec", l.srv, "ss", "-tnH", "state", "established", "( sport = :5201 )")
				return strings.Count(peers, "\n") >= 2
			})
			for _, line := range strings.Split(strings.TrimSpace(peers), "\n") {
				f := strings.Fields(line)
				peer, err := netip.ParseAddrPort(f[len(f)-1])
				if err != nil || peer.Addr().Unmap() != client {
					t.Errorf("server-side socket %q: peer is not the client %s", line, client)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("iperf3 -R=%v: %v\n%s", reverse, err, out.String())
			}
			var res struct {
				End struct {
					SumReceived struct {
						Bytes         int64   `json:"bytes"`
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("iperf3 output: %v\n%s", err, out.String())
			}
			if res.End.SumReceived.Bytes == 0 {
				t.Fatalf("iperf3 -R=%v moved nothing:\n%s", reverse, out.String())
			}
			t.Logf("iperf3 reverse=%v through the agents: %d bytes, %.2f Gbit/s, server saw:\n%s",
				reverse, res.End.SumReceived.Bytes, res.End.SumReceived.BitsPerSecond/1e9, peers)
			select {
			case <-srv.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("iperf3 server did not finish")
			}
		}
	})

	t.Run("curl", func(t *testing.T) {
		srv := startHelperInNetns(t, l.srv, "http")
		if l := srv.next(t, "http server"); l != "ready" {
			t.Fatalf("http server said %q", l)
		}
		file := filepath.Join(t.TempDir(), "file")
		sh(t, "ip", "netns", "exec", l.cli, "curl", "-sS", "--fail", "--max-time", "60", "-o", file, "http://"+server.String()+"/file")
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(got); len(got) != httpFileSize || !bytes.Equal(sum[:], prefixHash(httpFileSeed, httpFileSize)) {
			t.Fatalf("downloaded %d bytes, not the server's file", len(got))
		}
		upload := filepath.Join(t.TempDir(), "upload")
		body := bytes.Repeat([]byte("sosappliance upload "), 1<<20)
		if err := os.WriteFile(upload, body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		out := sh(t, "ip", "netns", "exec", l.cli, "curl", "-sS", "--fail", "--max-time", "60", "-T", upload, "http://"+server.String()+"/up")
		if out != hex.EncodeToString(sum[:]) {
			t.Fatalf("server hashed the upload as %q, want %x", out, sum)
		}
		for range 2 {
			if r := srv.next(t, "http request"); !strings.HasPrefix(r, "remote "+client.String()+":") {
				t.Errorf("http server saw %q, want the client %s", r, client)
			}
		}
	})

	// Every HTTP session completed at both agents. iperf3 ends a test by
	// closing its data connection while the peer still sends, which plain
	// TCP answers with a reset; the agents pass that on, so an iperf3
	// session may abort, but only where one agent saw an end host fail.
	origins := map[string][]AbortRecord{}
	for name, ag := range map[string]*nsProcess{"agent A": agentA, "agent B": agentB} {
		var st Stats
		testsupport.Eventually(t, 30*time.Second, name+" sessions to finish", func() bool {
			st = ag.stats(t)
			return st.Totals.SessionsActive == 0
		})
		if st.Totals.SessionsCompleted < 4 {
			t.Errorf("%s: %+v", name, st.Totals)
		}
		for _, r := range st.RecentAborts {
			origins[r.ID] = append(origins[r.ID], r)
		}
		t.Logf("%s: %d sessions completed, %d aborted, %d bytes up, %d bytes down", name,
			st.Totals.SessionsCompleted, st.Totals.SessionsAborted, st.Totals.BytesUp, st.Totals.BytesDown)
	}
	for id, recs := range origins {
		endHost := false
		for _, r := range recs {
			endHost = endHost || r.Reason == AbortEndpoint
			if r.Whitelist != "iperf" {
				t.Errorf("session %s aborted: %+v", id, r)
			}
		}
		if !endHost {
			t.Errorf("session %s aborted without an end host failing: %+v", id, recs)
		}
	}
}
