package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// The tests here run TCP over a path with a WAN's round trip, which the
// machine has no netem for: two namespaces joined by TUN devices and a
// forwarder that delays each packet (100 ms each way) and can drop all of
// one direction. They check the silent-path check (stream.unanswered)
// against what TCP really does: probes of a closed window answered by a
// live peer (a stopped agent) are not silence; a path that drops
// everything, one way or both, is. Written by review.

// openTun opens a TUN device named name inside the namespace h, as a
// nonblocking *os.File (so Close ends a Read).
func openTun(t *testing.T, h netns.NsHandle, name string) *os.File {
	t.Helper()
	var f *os.File
	err := tuning.RunInNetns(h, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		var req [unix.IFNAMSIZ + 64]byte
		copy(req[:], name)
		*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
			unix.Close(fd)
			return errno
		}
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		t.Fatalf("tun %s: %v", name, err)
	}
	return f
}

// delayLink forwards packets from src to dst after delay, in order.
func delayLink(src, dst *os.File, delay time.Duration, wg *sync.WaitGroup) {
	delayLinkDropping(src, dst, delay, wg, nil)
}

// delayLinkDropping is delayLink dropping every packet while drop is set.
func delayLinkDropping(src, dst *os.File, delay time.Duration, wg *sync.WaitGroup, drop *atomic.Bool) {
	type pkt struct {
		due time.Time
		b   []byte
	}
	q := make(chan pkt, 100000)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(q)
		for {
			b := make([]byte, 65536)
			n, err := src.Read(b)
			if err != nil {
				return
			}
			if drop != nil && drop.Load() {
				continue
			}
			q <- pkt{time.Now().Add(delay), b[:n]}
		}
	}()
	go func() {
		defer wg.Done()
		for p := range q {
			time.Sleep(time.Until(p.due))
			_, _ = dst.Write(p.b)
		}
	}()
}

// TestClosedWindowProbesAnsweredNotSilent: a peer whose kernel answers
// every zero-window probe (its reader paused: a SIGSTOPped agent, or one
// whose stream is not read) on a 200 ms RTT path. The window stays
// closed; TCP backs its probes off (tcp_probe0_when: doubling, up to 120
// s) while the peer answers each. A housekeeping tick that falls between
// a probe and its answer sees tcpi_probes = 1 (icsk_probes_out counts the
// probe when it is sent, its answer resets it) and tcpi_last_ack_recv =
// the whole gap before; unanswered must not take that for silence.
// (Found by review: it once did, as soon as a gap passed the stall
// timeout.)
func TestClosedWindowProbesAnsweredNotSilent(t *testing.T) {
	t.Parallel() // mostly waiting on a 200 ms path of its own namespaces
	testsupport.RequireRoot(t, "ip")
	const stall = 2 * time.Second
	sender, rc := delayedPair(t, 32<<10, nil, nil)

	// The sender writes more than the peer's buffers hold; the peer does
	// not read (its agent is paused), so its window closes.
	const total = 1 << 20
	wrote := make(chan error, 1)
	go func() {
		_, err := sender.Write(make([]byte, total))
		wrote <- err
	}()
	testsupport.Eventually(t, 30*time.Second, "a closed window", func() bool {
		info, ok := readTCPInfo(sender)
		return ok && info.unacked == 0 && info.notsent > 0
	})
	t.Log("window closed; polling TCP_INFO as housekeeping does (every 250 ms) for 15 s")

	st := &stream{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(15 * time.Second)
	var prevAck time.Duration
	answers, flagged := 0, 0
	var first string
	for now := range tick.C {
		if now.After(end) {
			break
		}
		info, ok := readTCPInfo(sender)
		if ok && info.lastAckRecv < prevAck {
			answers++ // an ACK came since the last tick: a probe's answer
		}
		prevAck = info.lastAckRecv
		if d := st.unanswered(now, info, ok); d > stall {
			flagged++
			if first == "" {
				first = fmt.Sprintf("silence %s: notsent %d unacked %d probes %d rtoRetrans %d lastAckRecv %s",
					d, info.notsent, info.unacked, info.probes, info.rtoRetrans, info.lastAckRecv)
			}
			t.Logf("tick says silent (%s): probes %d, last ACK %s ago, notsent %d", d, info.probes, info.lastAckRecv, info.notsent)
		}
	}
	// The peer was alive all along: it reads now and everything arrives.
	got := make(chan int64, 1)
	go func() {
		var n int64
		b := make([]byte, 1<<16)
		for n < total {
			m, err := rc.Read(b)
			n += int64(m)
			if err != nil {
				break
			}
		}
		got <- n
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("sender: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the sender never finished: the peer was not alive?")
	}
	if n := <-got; n != total {
		t.Fatalf("peer read %d bytes, want %d", n, total)
	}
	t.Logf("the peer answered (ACKs seen between ticks at least %d times) and took all %d bytes once it read", answers, total)
	if flagged > 0 {
		t.Errorf("a healthy stream behind a closed window was found silent at %d ticks; first: %s", flagged, first)
	}
}

// delayedLink joins the namespaces nsA and nsB (which exist) by TUN
// devices w0 with the addresses given, and forwards between them after
// oneWay, dropping every packet A to B while dropAB is set and B to A
// while dropBA is (nil: never).
func delayedLink(t *testing.T, nsA, addrA, nsB, addrB string, oneWay time.Duration, dropAB, dropBA *atomic.Bool) {
	t.Helper()
	var tuns [2]*os.File
	for i, ns := range []string{nsA, nsB} {
		h, err := netns.GetFromName(ns)
		if err != nil {
			t.Fatal(err)
		}
		tuns[i] = openTun(t, h, "w0")
		h.Close()
	}
	wg := &sync.WaitGroup{}
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { tuns[0].Close(); tuns[1].Close() })
	sh(t, "ip", "-n", nsA, "addr", "add", addrA, "peer", addrB, "dev", "w0")
	sh(t, "ip", "-n", nsB, "addr", "add", addrB, "peer", addrA, "dev", "w0")
	sh(t, "ip", "-n", nsA, "link", "set", "w0", "up")
	sh(t, "ip", "-n", nsB, "link", "set", "w0", "up")
	delayLinkDropping(tuns[0], tuns[1], oneWay, wg, dropAB)
	delayLinkDropping(tuns[1], tuns[0], oneWay, wg, dropBA)
}

// delayedPair sets up two namespaces joined by a delayedLink of 100 ms
// each way and returns a connected pair (a in A, b in B); b's receive
// buffer is rcvbuf bytes (0: the kernel's).
func delayedPair(t *testing.T, rcvbuf int, dropAB, dropBA *atomic.Bool) (a, b *net.TCPConn) {
	t.Helper()
	nsA, nsB := nsName("sosdlc"), nsName("sosdld")
	for _, ns := range []string{nsA, nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	delayedLink(t, nsA, "10.99.0.1", nsB, "10.99.0.2", 100*time.Millisecond, dropAB, dropBA)
	var ln net.Listener
	if err := tuning.RunInNamedNetns(nsB, func() error {
		lc := net.ListenConfig{Control: streamTuning{rcvbuf: rcvbuf}.control}
		var err error
		ln, err = lc.Listen(context.Background(), "tcp4", "10.99.0.2:7001")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var c net.Conn
	if err := tuning.RunInNamedNetns(nsA, func() error {
		d := net.Dialer{Timeout: 5 * time.Second, Control: streamTuning{keepalive: 2 * time.Second}.control}
		var err error
		c, err = d.Dial("tcp4", "10.99.0.2:7001")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return c.(*net.TCPConn), r.(*net.TCPConn)
}

// TestOneWaySilenceFound: the path drops everything from this agent to
// the peer while the peer's segments still get through. Every segment of
// the peer carries an ACK field that tcp_ack takes (ack == snd_una is not
// "old") and refreshes rcv_tstamp; the question was whether that hides the
// silence. It does not for long: the peer's own data goes unacknowledged
// (its ACKs are what the path drops), so its TCP too falls back to RTO
// retransmits at backed-off intervals, and tcpi_last_ack_recv here grows
// past the stall timeout with them (later than on a path silent both
// ways).
func TestOneWaySilenceFound(t *testing.T) {
	t.Parallel() // mostly waiting on a 200 ms path of its own namespaces
	testsupport.RequireRoot(t, "ip")
	const stall = 2 * time.Second
	var dropAB, dropBA atomic.Bool
	a, b := delayedPair(t, 0, &dropAB, &dropBA)
	// The peer sends a little on the stream all along (its CREDIT and ACK
	// frames, or the other direction's data); this side reads it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				_ = b.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = b.Write([]byte("credit"))
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 1024)
		for {
			_ = a.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, err := a.Read(buf)
			select {
			case <-stop:
				return
			default:
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	time.Sleep(time.Second)
	dropAB.Store(true)
	if _, err := a.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	st := &stream{}
	var worst time.Duration
	var last tcpInfo
	for range 40 { // 10 s of housekeeping ticks
		time.Sleep(250 * time.Millisecond)
		info, ok := readTCPInfo(a)
		last = info
		worst = max(worst, st.unanswered(time.Now(), info, ok))
	}
	t.Logf("after 10 s: unacked %d, rtoRetrans %d, lastAckRecv %s; unanswered at most %s", last.unacked, last.rtoRetrans, last.lastAckRecv, worst)
	if last.unacked == 0 || last.rtoRetrans == 0 {
		t.Fatalf("want data unacknowledged and RTO retransmits: %+v", last)
	}
	if worst <= stall {
		t.Errorf("nothing this stream sent arrived for 10 s (RTO retransmits %d), yet unanswered found it silent for at most %s (stall %s)",
			last.rtoRetrans, worst, stall)
	}
}

// TestSilentBehindClosedWindow: a path that goes silent both ways while
// the window is closed is still found: the zero-window probes go
// unanswered.
func TestSilentBehindClosedWindow(t *testing.T) {
	t.Parallel() // mostly waiting on a 200 ms path of its own namespaces
	testsupport.RequireRoot(t, "ip")
	const stall = 2 * time.Second
	var dropAB, dropBA atomic.Bool
	a, _ := delayedPair(t, 0, &dropAB, &dropBA)
	go func() { _, _ = a.Write(make([]byte, 16<<20)) }()
	testsupport.Eventually(t, 30*time.Second, "a closed window", func() bool {
		info, ok := readTCPInfo(a)
		return ok && info.unacked == 0 && info.notsent > 0
	})
	time.Sleep(5 * time.Second) // probes backed off a little
	dropAB.Store(true)
	dropBA.Store(true)
	died := time.Now()
	st := &stream{}
	var found time.Duration
	for now := range time.Tick(250 * time.Millisecond) {
		info, ok := readTCPInfo(a)
		if st.unanswered(now, info, ok) > stall {
			found = now.Sub(died)
			break
		}
		if now.Sub(died) > 60*time.Second {
			break
		}
	}
	t.Logf("a path silent behind a closed window found after %s", found)
	if found == 0 {
		t.Error("a path silent behind a closed window not found within 60 s")
	}
}

// newDelayedLab is newLab with the link between the agents delayed by
// oneWay each way (delayedLink).
func newDelayedLab(t *testing.T, oneWay time.Duration) *lab {
	return newLabWith(t, "sosd", func(l *lab) {
		delayedLink(t, l.agA, "192.168.77.1", l.agB, "192.168.77.2", oneWay, nil, nil)
		sh(t, "ip", "-n", l.agA, "route", "add", "10.10.2.0/24", "dev", "w0")
		sh(t, "ip", "-n", l.agB, "route", "add", "10.10.1.0/24", "dev", "w0")
	})
}

// TestPausedPeerAgentKeepsStreams: the server-side agent's process is stopped
// (SIGSTOP: a debugger, a frozen cgroup, a long swap storm) mid-upload on a
// 200 ms RTT path that stays up; its kernel keeps answering. The client
// side's streams then hold data behind closed windows whose probes are all
// answered: nothing on the path went silent, and once the agent runs again
// the transfer goes on. No stream should be lost for "silent".
func TestPausedPeerAgentKeepsStreams(t *testing.T) {
	t.Parallel() // mostly waiting on a 200 ms path of its own namespaces
	testsupport.RequireRoot(t, "ip", "curl")
	l := newDelayedLab(t, 100*time.Millisecond)
	client, server := labClient, labServer
	agentA, agentB, srv := startHTTPAgents(t, l, agentspec.Pool{})
	t.Cleanup(func() { _ = agentB.Cmd.Process.Signal(syscall.SIGCONT) })
	file := filepath.Join(t.TempDir(), "up")
	body := bytes.Repeat([]byte("paused "), (8<<20)/7)
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	cmd := exec.Command("ip", "netns", "exec", l.cli, "curl", "-sS", "--fail", "--max-time", "120",
		"--limit-rate", "2M", "-T", file, "http://"+server.String()+"/up")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the upload under way", func() bool {
		return agentA.stats(t).Totals.BytesUp >= 2<<20
	})
	const pause = 10 * time.Second
	if err := agentB.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent B stopped for %s", pause)
	time.Sleep(pause)
	lostWhilePaused := agentA.stats(t).Totals.StreamsLost
	if err := agentB.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("curl upload: %v: %s", err, stderr.String())
	}
	if out.String() != hex.EncodeToString(sum[:]) {
		t.Fatalf("server hashed the upload as %q, want %x", out.String(), sum)
	}
	if r := srv.next(t, "http request"); !strings.HasPrefix(r, "remote "+client.String()+":") {
		t.Errorf("http server saw %q, want the client %s", r, client)
	}
	ta, tb := agentA.stats(t).Totals, agentB.stats(t).Totals
	t.Logf("client side: lost %d streams while B was stopped, %d in all, replaced %d; server side lost %d",
		lostWhilePaused, ta.StreamsLost, ta.StreamsReplaced, tb.StreamsLost)
	if lostWhilePaused != 0 {
		t.Errorf("the client side lost %d streams to a peer agent that was only stopped (its kernel answered every probe)", lostWhilePaused)
	}
}
