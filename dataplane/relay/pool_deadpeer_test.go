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

// endingProxy relays the client side's streams to the far agent. end
// ends the streams open then as the far agent's process ending would:
// the client side gets a FIN, and what it sends after is swallowed (the
// reset that answers it would come a round trip later on a long path).
type endingProxy struct {
	addr netip.AddrPort
	mu   sync.Mutex
	open []func()
}

func newEndingProxy(t *testing.T, target netip.AddrPort) *endingProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &endingProxy{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
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
			d, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(target))
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, d)
			mu.Unlock()
			var ended atomic.Bool
			p.mu.Lock()
			p.open = append(p.open, func() {
				ended.Store(true)
				_ = d.Close() // the copier below sends the client side its FIN
			})
			p.mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, d)
				_ = c.CloseWrite()
			})
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && !ended.Load() {
						if _, werr := d.Write(buf[:n]); werr != nil && !ended.Load() {
							_ = c.Close()
							return
						}
					}
					if err != nil {
						if !ended.Load() {
							_ = d.CloseWrite()
						}
						return
					}
				}
			})
		}
	})
	return p
}

// end ends every stream open now.
func (p *endingProxy) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.open {
		f()
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
	var proxy *endingProxy
	p := startPair(t, pairOptions{streams: 1, pool: agentspec.Pool{MinIdle: 2, Max: 2},
		configA: func(cfg *Config) {
			proxy = newEndingProxy(t, cfg.Client[0].Peer)
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
