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

// gateProxy relays TCP to a switchable target. While holding, a
// connection accepted is held (its bytes wait in the sockets) until
// release, and only then dialed to the target of that moment. silence
// ends every connection relayed so far at its far side and leaves its
// client side open and silent: a far agent whose process ended, on a
// path that lost what its end said.
type gateProxy struct {
	addr     netip.AddrPort
	target   atomic.Pointer[netip.AddrPort]
	holding  atomic.Bool
	silenced atomic.Bool
	gate     chan struct{}
	release  func()
	mu       sync.Mutex
	live     [][2]*net.TCPConn // client side, far side
}

func newGateProxy(t *testing.T, target netip.AddrPort) *gateProxy {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{addr: ln.Addr().(*net.TCPAddr).AddrPort(), gate: make(chan struct{})}
	p.release = sync.OnceFunc(func() { close(p.gate) })
	p.target.Store(&target)
	var wg sync.WaitGroup
	var all []*net.TCPConn
	var allMu sync.Mutex
	t.Cleanup(func() {
		p.release()
		_ = ln.Close()
		allMu.Lock()
		for _, c := range all {
			_ = c.Close()
		}
		allMu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			allMu.Lock()
			all = append(all, c)
			allMu.Unlock()
			held := p.holding.Load()
			wg.Go(func() {
				if held {
					<-p.gate
				}
				d, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(*p.target.Load()))
				if err != nil {
					reset(c)
					return
				}
				allMu.Lock()
				all = append(all, d)
				allMu.Unlock()
				if !held {
					p.mu.Lock()
					p.live = append(p.live, [2]*net.TCPConn{c, d})
					p.mu.Unlock()
				}
				wg.Go(func() {
					_, _ = io.Copy(d, c)
					_ = d.CloseWrite()
				})
				_, err = io.Copy(c, d)
				if !held && p.silenced.Load() {
					return // left open, silent, until the test's end
				}
				if err != nil {
					reset(c)
					return
				}
				_ = c.CloseWrite()
			})
		}
	})
	return p
}

// silence ends the connections relayed so far (not held ones) at the
// far side; their client sides hear nothing more.
func (p *gateProxy) silence() {
	p.silenced.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cd := range p.live {
		_ = cd[1].Close()
	}
	p.live = nil
}

// TestJoinsInFlightAcrossAFarAgentRestart: a pooled session's
// joins go while the client side has not heard the far agent (their
// hellos are held on the way), then the far agent is heard (the first
// bytes' echo), then its process ends, what it said as it ended lost on
// the way (stream 0 stays up and silent at the client side), and a new
// one takes its address. The held joins reach the new process and
// are refused as an unknown session; since 57c9dba such a refusal,
// whose hello went while the session was unfounded, is tried again
// rather than taken for a lost session. The far agent really lost it:
// the client side must still give up at once (the next join is refused
// too), not hold its client until the reconnect timeout (60 s here).
// Written by review (helper-52).
func TestJoinsInFlightAcrossAFarAgentRestart(t *testing.T) {
	var proxy *gateProxy
	p := startPair(t, pairOptions{streams: 4, chunk: 1000, queue: 2, pool: agentspec.Pool{MinIdle: 1, Max: 1},
		limitsA: Limits{ReconnectTimeout: 60 * time.Second},
		configA: func(cfg *Config) {
			proxy = newGateProxy(t, cfg.Client[0].Peer)
			cfg.Client[0].Peer = proxy.addr
		},
	}, echo)
	b2 := startAgent(t, Config{
		Name: "agent-b", DataListen: netip.MustParseAddrPort("127.0.0.1:0"), PSK: testPSK, Server: p.wlB,
	}, p.server.addr)
	testsupport.Eventually(t, 30*time.Second, "a full pool", func() bool { return onlyPool(t, p.a).Idle == 1 })

	var unheardDials atomic.Int32
	dialed := func(*net.TCPConn) error {
		if !clientSessionHeard(p.a) {
			unheardDials.Add(1)
		}
		return nil
	}
	p.a.testDialed.Store(&dialed)
	var refusals atomic.Int32
	refused := func(int) { refusals.Add(1) }
	p.a.testJoinRefused.Store(&refused)

	proxy.holding.Store(true) // the joins (and the pool's refill) wait on the way
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(40 * time.Second))
	msg := patterned(1000, 7)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
		t.Fatalf("the first bytes' echo: %v", err)
	}
	if unheardDials.Load() == 0 {
		t.Fatal("no join went before the far agent was heard: the test did not mount its case")
	}

	// The far agent's process ends; a new one listens where the proxy
	// now goes. The held joins go on to it.
	b2addr := b2.Addrs().Data
	proxy.target.Store(&b2addr)
	proxy.holding.Store(false)
	proxy.silence()
	crashed := time.Now()
	proxy.release()

	_, err := io.ReadAll(c)
	took := time.Since(crashed)
	ta := p.a.Stats().Totals
	t.Logf("client: %v after %v; %d join refusals taken up; client side: %d aborted %+v",
		err, took.Round(time.Millisecond), refusals.Load(), ta.SessionsAborted, p.a.Stats().RecentAborts)
	if err == nil {
		t.Fatal("the client's connection ended cleanly, though the far agent lost its session")
	}
	if isTimeout(err) {
		t.Fatalf("the client was still held %v after the far agent lost the session", took.Round(time.Millisecond))
	}
	if refusals.Load() == 0 {
		t.Fatal("no join refusal was taken up: the test did not mount its case")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
