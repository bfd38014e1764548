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

// finOnBindProxy relays the client side's streams to the far agent. Once
// armed, the next bytes the client side sends on a stream open then (an
// idle pooled stream's BIND; not a new stream's hello) are not forwarded: that stream's far end is closed, the
// client side gets a FIN, and what it sends after is swallowed, so no
// reset answers its BIND. That is an idle pooled stream of a far agent
// whose process ended as the stream was claimed, its FIN crossing the
// BIND on a long path (the BIND's reset comes a round trip later).
type finOnBindProxy struct {
	addr   netip.AddrPort
	killed chan struct{}
	fired  atomic.Bool
	mu     sync.Mutex
	open   []*atomic.Bool // per stream: open when armed
}

// arm makes the streams open now the ones whose next bytes end them.
func (p *finOnBindProxy) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.open {
		e.Store(true)
	}
}

func newFinOnBindProxy(t *testing.T, target netip.AddrPort) *finOnBindProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &finOnBindProxy{addr: ln.Addr().(*net.TCPAddr).AddrPort(), killed: make(chan struct{})}
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
			armed := new(atomic.Bool)
			p.mu.Lock()
			p.open = append(p.open, armed)
			p.mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, d)
				_ = c.CloseWrite()
			})
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && armed.Load() && p.fired.CompareAndSwap(false, true) {
						_ = d.Close() // the far end ends; the copier sends the FIN
						_, _ = io.Copy(io.Discard, c)
						close(p.killed)
						return
					}
					if n > 0 {
						if _, werr := d.Write(buf[:n]); werr != nil {
							_ = c.Close()
							return
						}
					}
					if err != nil {
						_ = d.CloseWrite()
						return
					}
				}
			})
		}
	})
	return p
}

// TestPooledStreamEndedAsItsBindGoes: a session claims an idle pooled
// stream whose far end has just closed (the far agent's process ended),
// before the pool's watcher has seen its FIN. The session's stream 0
// reads that FIN before anything from the far agent: the session was
// never founded there, so nothing of it reached the server, and it is a
// lost stream 0, founded again with a fresh hello (here the far agent
// answers it: a restart). Found by review (helper-45): the FIN was taken
// for the far agent ending the session, which aborted it and reset the
// client.
func TestPooledStreamEndedAsItsBindGoes(t *testing.T) {
	var proxy *finOnBindProxy
	p := startPair(t, pairOptions{streams: 1, pool: agentspec.Pool{MinIdle: 2, Max: 2},
		configA: func(cfg *Config) {
			proxy = newFinOnBindProxy(t, cfg.Client[0].Peer)
			cfg.Client[0].Peer = proxy.addr
		},
	}, echo)
	testsupport.Eventually(t, 30*time.Second, "a full pool", func() bool { return onlyPool(t, p.a).Idle == 2 })
	proxy.arm()
	roundTrip(t, p.entry, "through a stream that died as it was bound")
	select {
	case <-proxy.killed:
	default:
		t.Fatal("no stream ended as its BIND went: the test did not mount its case")
	}
	testsupport.Eventually(t, 30*time.Second, "the session complete on both ends", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	ta := p.a.Stats().Totals
	if ta.SessionsAborted != 0 || ta.Fallbacks != 0 {
		t.Errorf("client side: %d sessions aborted, %d carried direct; want the session founded again", ta.SessionsAborted, ta.Fallbacks)
	}
	if n := onlyPool(t, p.a).Refounds; n != 1 {
		t.Errorf("pool refounds = %d, want 1", n)
	}
}
