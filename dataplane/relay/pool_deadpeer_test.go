package relay

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// crashProxy relays the client side's streams to the far agent at
// target (switchable: a restarted far agent listens elsewhere). Once
// muted, the streams open then forward nothing more from the far agent
// to the client side (the far agent's frames never left its process),
// and when the far agent's end of such a stream ends, however it ends,
// the client side gets a FIN: the kernel's FIN when the far agent's
// process ends. With reset set, it gets a reset instead: the kernel's
// answer when the process ends with bytes it had not read. end ends the
// streams open then at the far agent's side, as its process ending
// would; what the client side sends on them after is taken and never
// answered (on a long path the reset that answers it comes a round trip
// later).
type crashProxy struct {
	addr   netip.AddrPort
	target atomic.Pointer[netip.AddrPort]
	reset  atomic.Bool
	mu     sync.Mutex
	open   []*proxiedStream
}

// proxiedStream is one stream through a crashProxy: far is its far
// agent's side.
type proxiedStream struct {
	muted atomic.Bool
	far   *net.TCPConn
}

func newCrashProxy(t *testing.T, target netip.AddrPort) *crashProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &crashProxy{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	p.target.Store(&target)
	var (
		mu    sync.Mutex
		conns []*net.TCPConn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			d, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(*p.target.Load()))
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, d)
			mu.Unlock()
			ps := &proxiedStream{far: d}
			muted := &ps.muted
			p.mu.Lock()
			p.open = append(p.open, ps)
			p.mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(d, c)
				_ = d.CloseWrite()
			})
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := d.Read(buf)
					if n > 0 && !muted.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						if muted.Load() && p.reset.Load() {
							reset(c)
							return
						}
						_ = c.CloseWrite() // the far agent's process ended: a FIN
						return
					}
				}
			})
		}
	})
	return p
}

func (p *crashProxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.open {
		s.muted.Store(true)
	}
}

// end ends every stream open now at its far agent's side.
func (p *crashProxy) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.open {
		_ = s.far.Close()
	}
	p.open = nil
}

// TestPooledStreamEndedAsItIsClaimed: an idle pooled stream's FIN comes
// as a session claims it, after its watcher's last look (here: held
// until the claim stopped the watcher). The claim drops it as an idle
// stream that died, and the session opens a fresh stream 0 instead.
// Found by review (helper-45): the session sent its BIND on the ended
// stream, read its FIN, took it for the far agent's process ending, and
// aborted; the client was reset although nothing of it had left.
func TestPooledStreamEndedAsItIsClaimed(t *testing.T) {
	var proxy *crashProxy
	p := startPair(t, pairOptions{streams: 1, pool: agentspec.Pool{MinIdle: 2, Max: 2},
		configA: func(cfg *Config) {
			proxy = newCrashProxy(t, cfg.Client[0].Peer)
			cfg.Client[0].Peer = proxy.addr
		},
	}, echo)
	testsupport.Eventually(t, 30*time.Second, "a full pool", func() bool { return onlyPool(t, p.a).Idle == 2 })
	var claimed atomic.Int32
	hook := func(got []*pooledStream) {
		if !claimed.CompareAndSwap(0, int32(len(got))) {
			return
		}
		proxy.end()
		testsupport.Eventually(t, 10*time.Second, "the claimed streams' FINs", func() bool {
			for _, ps := range got {
				if !peerClosed(ps.conn) {
					return false
				}
			}
			return true
		})
	}
	p.a.testClaimed.Store(&hook)
	roundTrip(t, p.entry, "through a fresh stream")
	if claimed.Load() == 0 {
		t.Fatal("no pooled stream was claimed: the test did not mount its case")
	}
	testsupport.Eventually(t, 30*time.Second, "the session complete on both ends", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	ta, ps := p.a.Stats().Totals, onlyPool(t, p.a)
	if ta.SessionsAborted != 0 || ta.Fallbacks != 0 {
		t.Errorf("client side: %d sessions aborted, %d carried direct; want the session carried on a fresh stream", ta.SessionsAborted, ta.Fallbacks)
	}
	if ps.Died < uint64(claimed.Load()) {
		t.Errorf("pool died = %d, want the %d claimed streams that had ended counted", ps.Died, claimed.Load())
	}
}
