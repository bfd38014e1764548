package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Addresses of the lab's end hosts, and agent B's data port in
// startHTTPAgents.
var (
	labClient = netip.MustParseAddr("10.10.1.1")
	labServer = netip.MustParseAddr("10.10.2.1")
)

const labDataPort = 9877

// labClients are the lab's client addresses.
var labClients = []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24")}

// labRoute is the whitelist of startHTTPAgents, its limits and health
// address.
var (
	labRoute  = Whitelist{Name: "http", Clients: labClients, Server: labServer, Port: 80, Streams: 4, ChunkSize: 65536}
	labLimits = Limits{StallTimeout: 2 * time.Second}
	labHealth = netip.MustParseAddrPort("127.0.0.1:9878")
)

// labAgentA is agent A of startHTTPAgents: the client side, steered
// connections at tproxyPort, a warm pool as pool says.
func labAgentA(tproxyPort uint16, pool agentspec.Pool) Config {
	toB := labRoute
	toB.Peer, toB.PeerName, toB.Pool = netip.AddrPortFrom(netip.MustParseAddr("192.168.77.2"), labDataPort), "agent-b", pool
	return Config{
		TransparentListen: netip.AddrPortFrom(netip.IPv4Unspecified(), tproxyPort),
		HealthListen:      labHealth, PSK: testPSK, Name: "agent-a", Client: []Whitelist{toB}, Limits: labLimits,
	}
}

// labAgentB is agent B of startHTTPAgents: the server side.
func labAgentB() Config {
	fromA := labRoute
	fromA.PeerName = "agent-a"
	return Config{
		DataListen:   netip.AddrPortFrom(netip.IPv4Unspecified(), labDataPort),
		HealthListen: labHealth, PSK: testPSK, Name: "agent-b", Server: []Whitelist{fromA}, Limits: labLimits,
	}
}

// pools is the agent's client-side pools (the helper's "pools" command).
func (p *nsProcess) pools(t *testing.T) []PoolStats {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, "pools"); err != nil {
		t.Fatal(err)
	}
	var ps []PoolStats
	if err := json.Unmarshal([]byte(p.next(t, "pools")), &ps); err != nil {
		t.Fatal(err)
	}
	return ps
}

// startHTTPAgents steers the lab's client traffic to labServer:80
// through agent A to agent B (4 streams of 64 KiB, a warm pool as pool
// says, a stall timeout of 2 s: the tests wait for it a few times, far
// below the reconnect timeout) and starts the HTTP helper on the server.
func startHTTPAgents(t *testing.T, l *lab, pool agentspec.Pool) (agentA, agentB, srv *nsProcess) {
	t.Helper()
	const tproxyPort = 9876
	steer(t, l.agA, item.SteeringSpec{Interface: "a0", ListenPort: tproxyPort, Divert: []item.Divert{
		{Clients: labClients, Server: labServer, Port: 80},
	}})
	steer(t, l.agB, item.SteeringSpec{})
	agentA = startLabAgent(t, l.agA, labAgentA(tproxyPort, pool))
	agentB = startLabAgent(t, l.agB, labAgentB())
	srv = startHelperInNetns(t, l.srv, "http")
	if line := srv.next(t, "http server"); line != "ready" {
		t.Fatalf("http server said %q", line)
	}
	return agentA, agentB, srv
}

// TestNetnsSilentPathDeath: a NAT or stateful firewall between the agents
// loses its state and from then on drops every packet of the connections
// it knew, without a word (no reset, no ICMP). Each agent then holds
// streams whose TCP retransmits into a void; keepalive never probes a
// connection with data outstanding, so without a check of its own a
// sender would wait for TCP's own timeout (some 15 minutes). An agent
// that has had data unacknowledged on a stream, and heard no ACK for it,
// for the stall timeout loses the stream; the client side joins new
// connections (which the path carries), or founds the session again when
// the far agent never heard of it. Run for real: agents in network
// namespaces, the path's silence made by nftables drops of exactly the
// connections open when it "lost its state", curl as the end host.
func TestNetnsSilentPathDeath(t *testing.T) {
	t.Parallel() // mostly waiting, in namespaces of its own
	testsupport.RequireRoot(t, "ip", "nft", "curl", "ss")
	l := newLab(t)
	const dataPort = labDataPort
	agentA, agentB, srv := startHTTPAgents(t, l, agentspec.Pool{MinIdle: 4, Max: 4})
	pools := func() []PoolStats {
		ps := agentA.pools(t)
		if len(ps) != 1 {
			t.Fatalf("agent A has %d pools, want 1", len(ps))
		}
		return ps[0:1]
	}
	fullPool := func() {
		testsupport.Eventually(t, 30*time.Second, "a full pool", func() bool { return pools()[0].Idle == 4 })
	}
	// The path "loses its state" of every connection between the agents
	// open now: a table per loss, dropping them both ways at agent A.
	losses := 0
	loseState := func() int {
		out := sh(t, "ip", "netns", "exec", l.agA, "ss", "-tnH", "state", "established", fmt.Sprintf("( dport = :%d )", dataPort))
		var ports []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			local, err := netip.ParseAddrPort(f[len(f)-2])
			if err != nil {
				t.Fatalf("ss line %q: %v", line, err)
			}
			ports = append(ports, fmt.Sprint(local.Port()))
		}
		if len(ports) == 0 {
			t.Fatalf("no connection between the agents to lose:\n%s", out)
		}
		losses++
		set := strings.Join(ports, ", ")
		rules := fmt.Sprintf(`table inet sosloss%d {
	chain out { type filter hook output priority 0; tcp dport %d tcp sport { %s } drop; }
	chain in { type filter hook input priority 0; tcp sport %d tcp dport { %s } drop; }
}
`, losses, dataPort, set, dataPort, set)
		cmd := exec.Command("ip", "netns", "exec", l.agA, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v\n%s\n%s", err, out, rules)
		}
		return len(ports)
	}
	totals := func(p *nsProcess) Totals { return p.stats(t).Totals }
	upload := func(t *testing.T, name string, size int, rate string, during func()) {
		t.Helper()
		file := filepath.Join(t.TempDir(), name)
		body := bytes.Repeat([]byte(name+" "), size/(len(name)+1))
		if err := os.WriteFile(file, body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		args := []string{"netns", "exec", l.cli, "curl", "-sS", "--fail", "--max-time", "90", "-T", file}
		if rate != "" {
			args = append(args, "--limit-rate", rate)
		}
		cmd := exec.Command("ip", append(args, "http://"+labServer.String()+"/up")...)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if during != nil {
			during()
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("curl upload: %v: %s (after %s)", err, stderr.String(), time.Since(start).Round(time.Millisecond))
		}
		if out.String() != hex.EncodeToString(sum[:]) {
			t.Fatalf("server hashed the upload as %q, want %x", out.String(), sum)
		}
		if r := srv.next(t, "http request"); !strings.HasPrefix(r, "remote "+labClient.String()+":") {
			t.Errorf("http server saw %q, want the client %s", r, labClient)
		}
		t.Logf("%d bytes uploaded intact in %s", len(body), time.Since(start).Round(time.Millisecond))
	}
	settled := func(t *testing.T, wantCompleted uint64) (Totals, Totals) {
		t.Helper()
		var ta, tb Totals
		testsupport.Eventually(t, 30*time.Second, "both agents to finish the session", func() bool {
			ta, tb = totals(agentA), totals(agentB)
			return ta.SessionsActive == 0 && tb.SessionsActive == 0
		})
		if ta.SessionsCompleted != wantCompleted || tb.SessionsCompleted != wantCompleted ||
			ta.SessionsAborted+tb.SessionsAborted != 0 || ta.Fallbacks != 0 {
			t.Errorf("want %d sessions completed on both sides, none aborted or carried direct: %+v / %+v",
				wantCompleted, ta, tb)
		}
		return ta, tb
	}

	t.Run("mid-upload", func(t *testing.T) {
		fullPool()
		upload(t, "midupload", 16<<20, "4M", func() {
			testsupport.Eventually(t, 30*time.Second, "the upload under way", func() bool {
				return totals(agentA).BytesUp >= 2<<20
			})
			t.Logf("the path lost the state of %d connections", loseState())
		})
		ta, tb := settled(t, 1)
		t.Logf("client side lost %d streams, replaced %d; server side lost %d", ta.StreamsLost, ta.StreamsReplaced, tb.StreamsLost)
		if ta.StreamsLost == 0 || ta.StreamsReplaced == 0 {
			t.Errorf("want the silent streams lost and replaced at the client side: %+v", ta)
		}
	})

	t.Run("at-bind", func(t *testing.T) {
		fullPool()
		before := pools()[0]
		t.Logf("the path lost the state of %d idle pooled connections", loseState())
		upload(t, "atbind", 4<<20, "", nil)
		settled(t, 2)
		after := pools()[0]
		if after.Refounds <= before.Refounds {
			t.Errorf("pool %+v (before %+v): want the session founded again", after, before)
		}
	})
}
