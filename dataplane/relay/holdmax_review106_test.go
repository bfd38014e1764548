package relay

// Written by review (helper-106): a key holder against the real
// server-side agent.

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// evilReader reads every frame B sends on e, opens it, and tracks the
// largest credit (bytes) B granted. Reads stop when stop closes or the
// stream ends.
type evilReader struct {
	credit   atomic.Uint64
	data     atomic.Int64
	ackSeen  atomic.Uint64
	aborted  atomic.Bool
	finSeen  atomic.Bool
	done     chan struct{}
	openErrs atomic.Int64
}

func readEvil(e *evilStream, initial uint64) *evilReader {
	r := &evilReader{done: make(chan struct{})}
	r.credit.Store(initial)
	go func() {
		defer close(r.done)
		buf := make([]byte, e.codec.FrameBufferSize())
		for {
			if _, err := io.ReadFull(e.c, buf[:stripe.HeaderSize]); err != nil {
				return
			}
			h, err := stripe.ParseHeader(buf[:stripe.HeaderSize])
			if err != nil || int(h.Length) > len(buf)-stripe.HeaderSize {
				return
			}
			body := buf[stripe.HeaderSize : stripe.HeaderSize+int(h.Length)]
			if _, err := io.ReadFull(e.c, body); err != nil {
				return
			}
			plain, err := e.codec.Open(h, buf[:stripe.HeaderSize], body)
			if err != nil {
				r.openErrs.Add(1)
				continue
			}
			switch h.Type {
			case stripe.FrameCredit:
				v, _ := stripe.ParseCreditBody(plain)
				storeMax(&r.credit, v)
			case stripe.FrameAck:
				v, _ := stripe.ParseAckBody(plain)
				storeMax(&r.ackSeen, v)
			case stripe.FrameData:
				r.data.Add(int64(len(plain)))
			case stripe.FrameFin:
				r.finSeen.Store(true)
			case stripe.FrameAbort:
				r.aborted.Store(true)
			}
		}
	}()
	return r
}

// TestKeyHolderSessionsHoldingTheirMost: a key holder opens as many
// sessions as the server side admits; on each it sends DATA as fast as the
// credit allows (the end server reads it all, so the receive window grows)
// and reads everything the end server sends back without ever ACKing it
// (the send retention grows). The server side must keep within
// limits.memory, in its reservation and in what it really holds.
func TestKeyHolderSessionsHoldingTheirMost(t *testing.T) {
	const (
		streams  = 2
		sessions = 4
		chunk    = 60000
	)
	lim := Limits{Memory: 48 << 20, SessionMemory: 16 << 20, MaxSessions: sessions, StallTimeout: time.Minute, ReconnectTimeout: 2 * time.Second}
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	defer halt()
	p := review106B(t, streams, lim, func(c *net.TCPConn) {
		defer c.Close()
		go func() { _, _ = io.Copy(io.Discard, c) }()
		buf := make([]byte, 1<<20)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Write(buf); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					return
				}
			}
		}
	}, nil)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapInuse
	frames0 := FrameMemory().InUse

	var wg sync.WaitGroup
	var conns []*net.TCPConn
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	initial := stripe.InitialCredit(streams, chunk)
	for i := range sessions {
		var id stripe.SessionID
		_, _ = rand.Read(id[:])
		client := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(42000+i))
		c, st, sec, err := evilHandshake(t, p, func(h *stripe.Hello) { h.Session, h.Streams, h.Client = id, streams, client })
		if err != nil || st != stripe.StatusAccepted {
			t.Fatalf("session %d: %v %v", i, st, err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		e := newEvilStream(t, c, sec, 0, chunk, 0)
		r := readEvil(e, initial)
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, chunk)
			var seq uint64
			for {
				select {
				case <-stop:
					return
				case <-r.done:
					return
				default:
				}
				if (seq+1)*chunk > r.credit.Load() {
					time.Sleep(time.Millisecond)
					continue
				}
				if err := e.data(seq, payload, 0); err != nil {
					return
				}
				seq++
			}
		}()
	}
	testsupport.Eventually(t, 10*time.Second, "the sessions up", func() bool { return len(p.b.Stats().Sessions) == sessions })
	var peakReserved, peakFrames int64
	var peakHeap uint64
	for range 40 {
		time.Sleep(100 * time.Millisecond)
		st := p.b.Stats().Totals
		peakReserved = max(peakReserved, st.MemoryReserved)
		peakFrames = max(peakFrames, FrameMemory().InUse-frames0)
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapInuse-min(ms.HeapInuse, heap0))
	}
	st := p.b.Stats()
	var window, retained int64
	for _, s := range st.Sessions {
		window = max(window, int64(s.Window/chunk))
		retained = max(retained, s.Memory>>20)
	}
	t.Logf("%d sessions: reserved peak %d MiB of %d MiB; frame buffers in use peak %d MiB; heap growth peak %d MiB; largest window %d frames, largest session memory %d MiB; goroutines %d",
		len(st.Sessions), peakReserved>>20, lim.Memory>>20, peakFrames>>20, peakHeap>>20, window, retained, goroutines())
	if peakReserved > lim.Memory {
		t.Errorf("reserved %d above limits.memory %d", peakReserved, lim.Memory)
	}
	if peakFrames > lim.Memory {
		t.Errorf("frame buffers in use %d above limits.memory %d", peakFrames, lim.Memory)
	}
	// The attacker stops sending and reading, and holds its streams open.
	halt()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := p.b.Shutdown(ctx)
	t.Logf("shutdown with %d held sessions took %v: %v", sessions, time.Since(start).Round(time.Millisecond), err)
	if time.Since(start) > 8*time.Second {
		t.Errorf("shutdown took %v", time.Since(start))
	}
}
