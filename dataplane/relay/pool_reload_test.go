package relay

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// reloadB applies mutate to the server-side agent's configuration.
func reloadB(t *testing.T, p *pair, psk []byte, mutate func(cfg *Config)) {
	t.Helper()
	reloadAgent(t, p.b, psk, mutate)
}

// reloadAgent reloads a with its configuration changed by mutate, psk
// joined again (the running configuration keeps none).
func reloadAgent(t *testing.T, a *Agent, psk []byte, mutate func(cfg *Config)) {
	t.Helper()
	cfg := a.cfg.Load().Config
	cfg.PSK = psk
	cfg.Client = append([]Whitelist(nil), cfg.Client...)
	cfg.Server = append([]Whitelist(nil), cfg.Server...)
	mutate(&cfg)
	if err := a.Update(cfg); err != nil {
		t.Fatal(err)
	}
}

// TestPooledStreamJudgedByTheReloadedConfig: a key holder (or agent-a
// before it was revoked) opens a pooled stream and keeps it idle; the
// operator then reloads the server-side agent to revoke agent-a, to rotate
// the PSK, or to remove the route. The reload closes the idle streams it
// no longer admits, and a BIND that comes anyway is judged by the
// configuration in force: no session is founded and the server is never
// dialed. Found by review: the BIND was admitted under the configuration
// the stream was accepted with, however long after the reload.
func TestPooledStreamJudgedByTheReloadedConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		psk    []byte
		mutate func(cfg *Config)
	}{
		{"initiator revoked", testPSK, func(cfg *Config) {
			cfg.Server[0].PeerName = "agent-z"
		}},
		{"psk rotated", []byte("a brand new pre-shared key, 32 b"), func(cfg *Config) {}},
		{"route removed", testPSK, func(cfg *Config) {
			// Only a route for another server is left.
			cfg.Server[0].Port++
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			p := startPair(t, pairOptions{}, func(c *net.TCPConn) {
				<-release
				_ = c.Close()
			})
			defer close(release)
			c, status, sec := pooledHandshake(t, p, "agent-a")
			if status != stripe.StatusAccepted {
				t.Fatalf("pooled stream refused before the reload: %s", status)
			}
			defer c.Close()
			testsupport.Eventually(t, 10*time.Second, "the pooled stream held", func() bool {
				return p.b.PooledStreams()["agent-a"] == 1
			})
			reloadB(t, p, tc.psk, tc.mutate)
			if tc.name != "psk rotated" {
				// A fresh stream of agent-a is refused now.
				_, _, hb := helloFrom(t, p, nil)
				fc, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
				if err == nil {
					key, _ := stripe.NewHandshakeKey(testPSK)
					if r, err := stripe.ParseReply(hb[:], rb[:], key); err == nil && r.Status == stripe.StatusAccepted {
						t.Errorf("a fresh hello after the reload was accepted")
					}
				}
				_ = fc.Close()
			}
			// Long after the reload, the idle pooled stream binds.
			time.Sleep(200 * time.Millisecond)
			frame := bindFrame(t, p, sec, netip.MustParseAddrPort("127.0.0.1:41234"))
			if _, err := c.Write(frame); err != nil {
				// The reload closed the stream: it no longer admits it.
				t.Logf("the BIND after the reload: %v", err)
			}
			testsupport.Eventually(t, 10*time.Second, "the BIND decided", func() bool {
				return p.b.PooledStreams()["agent-a"] == 0
			})
			time.Sleep(300 * time.Millisecond)
			if n, dialed := len(p.b.Stats().Sessions), p.server.accepted(); n != 0 || dialed != 0 {
				t.Errorf("after the reload (%s) a pooled stream from before it founded %d session(s) and the server was dialed %d time(s)",
					tc.name, n, dialed)
			}
		})
	}
}

// TestPooledStreamsWithinReloadedSessionLimit: max_sessions lowered to 1 by
// a reload holds for BINDs on pooled streams opened before it (found by
// review: they were admitted under the old limit, 256).
func TestPooledStreamsWithinReloadedSessionLimit(t *testing.T) {
	release := make(chan struct{})
	p := startPair(t, pairOptions{limitsB: Limits{ReconnectTimeout: 2 * time.Second}}, func(c *net.TCPConn) {
		<-release
		_ = c.Close()
	})
	defer close(release)
	const n = 4
	var conns []*net.TCPConn
	var secs []*stripe.Secrets
	for range n {
		c, status, sec := pooledHandshake(t, p, "agent-a")
		if status != stripe.StatusAccepted {
			t.Fatalf("pooled stream refused: %s", status)
		}
		defer c.Close()
		conns, secs = append(conns, c), append(secs, sec)
	}
	testsupport.Eventually(t, 10*time.Second, "the pooled streams held", func() bool {
		return p.b.PooledStreams()["agent-a"] == n
	})
	reloadB(t, p, testPSK, func(cfg *Config) { cfg.Limits.MaxSessions = 1 })
	if got := p.b.cfg.Load().limits.MaxSessions; got != 1 {
		t.Fatalf("max_sessions after the reload: %d", got)
	}
	for i, c := range conns {
		frame := bindFrame(t, p, secs[i], netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(42001+i)))
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.Eventually(t, 10*time.Second, "the BINDs decided", func() bool {
		return p.b.PooledStreams()["agent-a"] == 0
	})
	if got := len(p.b.Stats().Sessions); got > 1 {
		t.Errorf("the server side runs %d sessions, max_sessions is 1", got)
	}
}

// TestPoolFromSecondClientAgent: a server-side route admits sessions from
// several client-side agents (PeerNames, as appliance/desired writes for a
// site with more than one agent; PeerName is the first). The second
// agent's pooled hellos are admitted as its fresh streams are, so its warm
// pool fills (found by review: admitPooled compared PeerName only).
func TestPoolFromSecondClientAgent(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2, chunk: 1000, queue: 2, pool: agentspec.Pool{MinIdle: 2, Max: 2},
		serverWhitelist: func(e Whitelist) []Whitelist {
			e.PeerName = "agent-z"
			e.PeerNames = []string{"agent-z", "agent-a"}
			return []Whitelist{e}
		}}, echo)
	roundTrip(t, p.entry, "agent-a is admitted on fresh streams")
	ok := false
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if onlyPool(t, p.a).Idle == 2 {
			ok = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		t.Errorf("agent-a's pool toward a route that admits it never filled: %+v", onlyPool(t, p.a))
	}
}

// TestMovedBindRefused backs SECURITY.md's "a replayed or moved
// BIND fails" against the real agent: the BIND sealed for one pooled
// stream, sent on another, founds nothing and resets that stream.
func TestMovedBindRefused(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	x, status, secX := pooledHandshake(t, p, "agent-a")
	if status != stripe.StatusAccepted {
		t.Fatal(status)
	}
	defer x.Close()
	y, status, _ := pooledHandshake(t, p, "agent-a")
	if status != stripe.StatusAccepted {
		t.Fatal(status)
	}
	defer y.Close()
	testsupport.Eventually(t, 10*time.Second, "both held", func() bool { return p.b.PooledStreams()["agent-a"] == 2 })
	before := p.b.Stats().Totals.HandshakeFailures
	if _, err := y.Write(bindFrame(t, p, secX, netip.MustParseAddrPort("127.0.0.1:41999"))); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the moved BIND refused", func() bool { return p.b.PooledStreams()["agent-a"] == 1 })
	if st := p.b.Stats(); len(st.Sessions) != 0 || st.Totals.HandshakeFailures != before+1 || p.server.accepted() != 0 {
		t.Errorf("a moved BIND: %d sessions, %d failures (before %d), server dialed %d", len(st.Sessions), st.Totals.HandshakeFailures, before, p.server.accepted())
	}
}

// TestRotatedPSKRefillsThePool: a reload that changes the pre-shared key
// at the client side closes its pool's idle streams, whose keys came from
// the old one, and the pool fills again with streams of the new key, which
// the far agent (reloaded too) binds.
func TestRotatedPSKRefillsThePool(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2, chunk: 1000, queue: 2, pool: agentspec.Pool{MinIdle: 2, Max: 2}}, echo)
	testsupport.Eventually(t, 30*time.Second, "the pool filled", func() bool { return onlyPool(t, p.a).Idle == 2 })
	before := onlyPool(t, p.a)
	newPSK := []byte("a brand new pre-shared key, 32 b")
	reloadB(t, p, newPSK, func(*Config) {})
	cfg := p.a.cfg.Load().Config
	cfg.PSK = newPSK
	if err := p.a.Update(cfg); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the pool refilled under the new key", func() bool {
		st := onlyPool(t, p.a)
		// Closed by this reload (expired), or first by the far agent's
		// (died).
		gone := st.Expired + st.Died - before.Expired - before.Died
		return gone >= 2 && st.Refills >= before.Refills+2 && st.Idle == 2
	})
	roundTrip(t, p.entry, "a session on the refilled pool")
	if st := onlyPool(t, p.a); st.Claims == before.Claims {
		t.Errorf("the session took no pooled stream: %+v", st)
	}
}
