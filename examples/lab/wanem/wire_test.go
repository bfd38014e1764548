package wanem

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// listenIn opens a listener on addrB inside namespace B.
func (w *wire) listenIn(t *testing.T, network string) (ln net.Listener, pc net.PacketConn) {
	t.Helper()
	err := inNamespace(w.nsB, func() error {
		var err error
		if network == "tcp" {
			ln, err = net.Listen("tcp", net.JoinHostPort(addrB, "0"))
		} else {
			pc, err = net.ListenPacket("udp", net.JoinHostPort(addrB, "0"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ln != nil {
			ln.Close()
		}
		if pc != nil {
			pc.Close()
		}
	})
	return ln, pc
}

// dialFromA dials addr from inside namespace A.
func (w *wire) dialFromA(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	var conn net.Conn
	err := inNamespace(w.nsA, func() error {
		var err error
		conn, err = net.DialTimeout(network, addr, 10*time.Second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serveEcho echoes every connection on ln until ln closes.
func serveEcho(ln net.Listener) {
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
}

func TestWireCarriesTCPBothWays(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "ethtool")
	w := newWire(t)
	em := w.startEmulator(t, Symmetric(Shape{}))
	ln, _ := w.listenIn(t, "tcp")
	serveEcho(ln)
	conn := w.dialFromA(t, "tcp", ln.Addr().String())

	sent := make([]byte, 8<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(sent)
	writeErr := make(chan error, 1)
	go func() {
		_, err := conn.Write(sent)
		writeErr <- err
	}()
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	echoed := make([]byte, len(sent))
	if _, err := io.ReadFull(conn, echoed); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("sending: %v", err)
	}
	if !bytes.Equal(sent, echoed) {
		t.Fatal("the echo through the emulator differs from what was sent")
	}

	s := em.Stats()
	for _, dir := range []struct {
		name string
		ls   LinkStats
	}{{s.AtoBName, s.AtoB}, {s.BtoAName, s.BtoA}} {
		// 8 MiB each way in frames of at most 9014 bytes.
		if dir.ls.ForwardedBytes < 8<<20 || dir.ls.ForwardedPackets < (8<<20)/9014 {
			t.Errorf("%s forwarded %d frames %d bytes, want at least 8 MiB", dir.name, dir.ls.ForwardedPackets, dir.ls.ForwardedBytes)
		}
		if dir.ls.OversizeDropPackets != 0 {
			t.Errorf("%s dropped %d oversize frames: an offload is still on", dir.name, dir.ls.OversizeDropPackets)
		}
	}

	// An emulator that read back its own writes would keep forwarding the
	// last broadcast round and round; once traffic stops, so must it.
	conn.Close()
	time.Sleep(200 * time.Millisecond)
	before := em.Stats()
	time.Sleep(500 * time.Millisecond)
	after := em.Stats()
	if grew := after.AtoB.ReceivedPackets + after.BtoA.ReceivedPackets -
		before.AtoB.ReceivedPackets - before.BtoA.ReceivedPackets; grew > 10 {
		t.Errorf("idle wire received %d frames in 500ms: the emulator is reading its own writes", grew)
	}
}

func TestDelayShowsInRoundTrip(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "ethtool")
	const oneWay = 30 * time.Millisecond
	w := newWire(t)
	w.startEmulator(t, Symmetric(Shape{Delay: oneWay}))
	ln, _ := w.listenIn(t, "tcp")
	serveEcho(ln)

	dialStart := time.Now()
	conn := w.dialFromA(t, "tcp", ln.Addr().String())
	handshake := time.Since(dialStart)
	if handshake < 2*oneWay {
		t.Errorf("TCP handshake took %v, less than the %v round trip", handshake, 2*oneWay)
	}

	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	shortest := time.Hour
	buf := make([]byte, 1)
	for i := range 5 {
		start := time.Now()
		if _, err := conn.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			t.Fatal(err)
		}
		shortest = min(shortest, time.Since(start))
	}
	t.Logf("handshake %v, shortest echo %v, configured round trip %v", handshake, shortest, 2*oneWay)
	if shortest < 2*oneWay {
		t.Errorf("shortest echo took %v, less than the %v round trip", shortest, 2*oneWay)
	}
}

func TestSeededLossDropsConfiguredFraction(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "ethtool")
	const loss = 0.2
	const datagrams = 2000
	w := newWire(t)
	em := w.startEmulator(t, Symmetric(Shape{Loss: loss, Seed: 1}))
	_, pc := w.listenIn(t, "udp")
	if err := pc.(*net.UDPConn).SetReadBuffer(8 << 20); err != nil {
		t.Fatal(err)
	}
	conn := w.dialFromA(t, "udp", pc.LocalAddr().String())

	// Resolve ARP and see one datagram through before counting; ARP itself
	// crosses the lossy wire and may need a few tries.
	buf := make([]byte, 2048)
	primed := false
	for range 50 {
		if _, err := conn.Write([]byte("prime")); err != nil {
			t.Fatal(err)
		}
		_ = pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := pc.ReadFrom(buf); err == nil {
			primed = true
			break
		}
	}
	if !primed {
		t.Fatal("no datagram crossed the wire in 50 tries")
	}
	drain(pc, buf)

	before := em.Stats().AtoB
	payload := make([]byte, 200)
	for i := range datagrams {
		if _, err := conn.Write(payload); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			// Pace the burst so no socket buffer on the way overflows.
			time.Sleep(2 * time.Millisecond)
		}
	}
	arrived := drain(pc, buf)
	after := em.Stats().AtoB

	received := after.ReceivedPackets - before.ReceivedPackets
	lost := after.LossDropPackets - before.LossDropPackets
	forwarded := after.ForwardedPackets - before.ForwardedPackets
	t.Logf("emulator received %d, lost %d, forwarded %d; %d of %d datagrams arrived", received, lost, forwarded, arrived, datagrams)

	// ARP refreshes may add a frame or two to what the emulator saw.
	if received < datagrams || received > datagrams+10 {
		t.Errorf("emulator received %d frames, want the %d datagrams sent", received, datagrams)
	}
	if fraction := float64(lost) / float64(received); fraction < loss-0.05 || fraction > loss+0.05 {
		t.Errorf("lost %.3f of the frames, want %.2f±0.05", fraction, loss)
	}
	if lost+forwarded != received {
		t.Errorf("lost %d + forwarded %d != received %d", lost, forwarded, received)
	}
	if arrived > int(forwarded) || arrived < int(forwarded)-10 {
		t.Errorf("%d datagrams arrived but the emulator forwarded %d frames", arrived, forwarded)
	}
}

// drain reads datagrams until the wire has been quiet for half a second and
// returns how many arrived.
func drain(pc net.PacketConn, buf []byte) int {
	n := 0
	for {
		_ = pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, _, err := pc.ReadFrom(buf); err != nil {
			return n
		}
		n++
	}
}

// BenchmarkWANThroughput measures iperf3 -P 8 through the emulator set to
// 1 Gbit/s with no delay or loss, and through a kernel bridge in the same
// place as the baseline. The issue asks for at least 0.9 of the configured
// rate at MTU 9000; the ratios are reported, not asserted.
func BenchmarkWANThroughput(b *testing.B) {
	testsupport.RequireRoot(b, "ip", "ethtool", "iperf3")
	const rate = 1e9
	const seconds = 5

	bridged := newWire(b)
	bridged.bridge(b)
	emulated := newWire(b)
	emulated.startEmulator(b, Symmetric(Shape{Rate: rate}))

	var baseline, through float64
	for range b.N {
		baseline += bridged.iperf3(b, 8, seconds)
		through += emulated.iperf3(b, 8, seconds)
	}
	baseline /= float64(b.N)
	through /= float64(b.N)
	b.Logf("baseline %.3f Gbit/s, through the emulator %.3f Gbit/s of %.1f configured", baseline/1e9, through/1e9, rate/1e9)
	b.ReportMetric(through/1e9, "Gbit/s")
	b.ReportMetric(baseline/1e9, "baseline-Gbit/s")
	b.ReportMetric(through/rate, "ratio-to-rate")
	b.ReportMetric(through/baseline, "ratio-to-baseline")
}

func TestRunStopsEveryGoroutineAndClosesSockets(t *testing.T) {
	testsupport.RequireRoot(t, "ip", "ethtool")
	w := newWire(t)
	before := goleak.IgnoreCurrent()

	var em *Emulator
	if err := inNamespace(w.nsWAN, func() error {
		var err error
		em, err = New("wan0", "wan1", Symmetric(Shape{Rate: 1e6, Delay: time.Second}))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if open := w.packetSockets(t); open != 2 {
		t.Errorf("%d packet sockets open in the WAN namespace, want the emulator's 2", open)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	goleak.VerifyNone(t, before)

	if err := em.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded on closed sockets")
	}
	if open := w.packetSockets(t); open != 0 {
		t.Errorf("%d packet sockets still open in the WAN namespace after Run", open)
	}
}

// packetSockets counts the AF_PACKET sockets open in the WAN namespace.
func (w *wire) packetSockets(t *testing.T) int {
	t.Helper()
	var n int
	if err := inNamespace(w.nsWAN, func() error {
		data, err := os.ReadFile("/proc/thread-self/net/packet")
		if err != nil {
			return err
		}
		// One header line, then one line per socket.
		n = len(strings.Split(strings.TrimSpace(string(data)), "\n")) - 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
