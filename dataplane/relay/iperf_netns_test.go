package relay

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// iperfRun is one iperf3 transfer between two lab namespaces, started by
// startIperf and ended by finish.
type iperfRun struct {
	srv *nsProcess
	cmd *exec.Cmd
	out bytes.Buffer
	// peers is what ss listed at the listener while data flowed.
	peers string
}

// startIperf starts a one-shot iperf3 server on port in listenNS and a
// client in dialNS toward listenAt, with clientArgs (such as "-t", "2").
// Once the listener has iperf3's two connections it checks that each one's
// peer is the dialer's own address: the agents are transparent.
func startIperf(t *testing.T, listenNS, dialNS string, listenAt, dialer netip.Addr, port string, clientArgs ...string) *iperfRun {
	t.Helper()
	r := &iperfRun{srv: startInNetns(t, listenNS, "iperf3", "-s", "-1", "-p", port)}
	time.Sleep(300 * time.Millisecond) // iperf3 has no readiness signal
	args := append([]string{"netns", "exec", dialNS, "iperf3"}, clientArgs...)
	r.cmd = exec.Command("ip", append(args, "-c", listenAt.String(), "-p", port, "-J")...)
	r.cmd.Stdout = &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "iperf3 connections at the listener", func() bool {
		r.peers = sh(t, "ip", "netns", "exec", listenNS, "ss", "-tnH", "state", "established", "( sport = :"+port+" )")
		return strings.Count(r.peers, "\n") >= 2
	})
	for _, line := range strings.Split(strings.TrimSpace(r.peers), "\n") {
		f := strings.Fields(line)
		peer, err := netip.ParseAddrPort(f[len(f)-1])
		if err != nil || peer.Addr().Unmap() != dialer {
			t.Errorf("listener socket %q: peer is not the dialer %s", line, dialer)
		}
	}
	return r
}

// finish waits for the client, checks that it moved some bytes and that the
// server ended too, and returns the bytes the server received.
func (r *iperfRun) finish(t *testing.T) int64 {
	t.Helper()
	if err := r.cmd.Wait(); err != nil {
		t.Fatalf("iperf3: %v\n%s", err, r.out.String())
	}
	var res struct {
		End struct {
			SumReceived struct {
				Bytes int64 `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(r.out.Bytes(), &res); err != nil || res.End.SumReceived.Bytes == 0 {
		t.Fatalf("iperf3 moved nothing (%v):\n%s", err, r.out.String())
	}
	select {
	case <-r.srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("iperf3 server did not finish")
	}
	return res.End.SumReceived.Bytes
}

// awaitSession waits until the agent p lists a session on side ("client" or
// "server") from client to server for which also holds (nil: no more).
func awaitSession(t *testing.T, p *nsProcess, what, side string, client, server netip.Addr, also func(SessionStats) bool) {
	t.Helper()
	testsupport.Eventually(t, 10*time.Second, what, func() bool {
		for _, s := range p.stats(t).Sessions {
			if s.Side == side && s.Client.Addr().Unmap() == client && s.Server.Addr().Unmap() == server && (also == nil || also(s)) {
				return true
			}
		}
		return false
	})
}
