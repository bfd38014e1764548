package relay

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func newAgentKey(t *testing.T) *stripe.AgentKey {
	t.Helper()
	k, err := stripe.GenerateAgentKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pub(k *stripe.AgentKey) []byte {
	p := k.Public()
	return p[:]
}

// echoOnce sends want through p and reads it back whole.
func echoOnce(t *testing.T, p *pair, want []byte) {
	t.Helper()
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		_, _ = c.Write(want)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%d of %d bytes back, equal %v, err %v", len(got), len(want), bytes.Equal(got, want), err)
	}
}

// TestPerAgentKeys mounts the attack per-agent keys stop: a holder of
// the deployment's PSK (another site's agent, agent-c, with a key of its
// own) claims to be agent-a to agent-b. With the PSK alone agent-b would
// take it for agent-a (any PSK holder could); with per-agent keys its
// hellos do not authenticate: agent-b founds no session for it, counts
// the failures, and the connection is carried direct, unaccelerated. The
// agents themselves carry sessions, fresh and from a warm pool; an agent
// with per-agent keys meeting one without finds its hellos closed.
func TestPerAgentKeys(t *testing.T) {
	a, b, c := newAgentKey(t), newAgentKey(t), newAgentKey(t)
	// agent-b knows agent-a and agent-c.
	atB := func(cfg *Config) {
		cfg.AgentKey = b.Private()
		cfg.PeerKeys = map[string][]byte{"agent-a": pub(a), "agent-c": pub(c)}
	}
	as := func(k *stripe.AgentKey) func(*Config) {
		return func(cfg *Config) {
			cfg.AgentKey = k.Private()
			cfg.PeerKeys = map[string][]byte{"agent-b": pub(b)}
		}
	}
	want := patterned(1<<20, 3)

	t.Run("the agents", func(t *testing.T) {
		for _, pool := range []agentspec.Pool{{}, {MinIdle: 4, Max: 8}} {
			p := startPair(t, pairOptions{configA: as(a), configB: atB, pool: pool}, echo)
			if pool.MinIdle > 0 {
				testsupport.Eventually(t, 10*time.Second, "the pool filled", func() bool { return onlyPool(t, p.a).Idle >= pool.MinIdle })
			}
			echoOnce(t, p, want)
			if !p.a.Stats().PerAgentKeys || !p.b.Stats().PerAgentKeys {
				t.Error("an agent with per-agent keys does not report them in its stats")
			}
			ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
			if ta.Fallbacks != 0 || tb.SessionsStarted != 1 || tb.HandshakeFailures != 0 {
				t.Errorf("pool %+v: want the session accelerated: client %+v, server %+v", pool, ta, tb)
			}
		}
	})
	t.Run("another key holder as agent-a", func(t *testing.T) {
		p := startPair(t, pairOptions{configA: as(c), configB: atB, limitsA: Limits{PreAuthTimeout: 2 * time.Second}}, echo)
		echoOnce(t, p, want)
		ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
		t.Logf("impostor: %d fallbacks; agent-b: %d sessions, %d handshake failures", ta.Fallbacks, tb.SessionsStarted, tb.HandshakeFailures)
		if tb.SessionsStarted != 0 || tb.HandshakeFailures == 0 || ta.Fallbacks != 1 {
			t.Errorf("agent-b took the impostor's streams: client %+v, server %+v", ta, tb)
		}
		if n := p.server.accepted(); n != 1 {
			t.Errorf("the server accepted %d connections, want the direct one", n)
		}
	})
	t.Run("the PSK alone, the same impostor", func(t *testing.T) {
		// What per-agent keys close: agent-c's own agent, configured
		// as agent-a with the PSK, is taken for agent-a.
		p := startPair(t, pairOptions{}, echo)
		echoOnce(t, p, want)
		if p.b.Stats().PerAgentKeys {
			t.Error("an agent with the PSK alone reports per-agent keys")
		}
		if tb := p.b.Stats().Totals; tb.SessionsStarted != 1 {
			t.Errorf("with the PSK alone the claim of a name is not checked, yet agent-b founded %d sessions", tb.SessionsStarted)
		}
	})
	t.Run("one side only", func(t *testing.T) {
		p := startPair(t, pairOptions{configA: as(a), limitsA: Limits{PreAuthTimeout: 2 * time.Second}}, echo)
		echoOnce(t, p, want)
		ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
		if tb.SessionsStarted != 0 || tb.HandshakeFailures == 0 || ta.Fallbacks != 1 {
			t.Errorf("per-agent keys on the client side only: client %+v, server %+v", ta, tb)
		}
	})
}

// TestPerAgentKeysValidated: a peer a route names without a public key,
// a key of the wrong size, or peer keys without the agent's own are
// refused, naming the problem.
func TestPerAgentKeysValidated(t *testing.T) {
	a, b := newAgentKey(t), newAgentKey(t)
	base := func() Config {
		return Config{Name: "agent-a", TransparentListen: netip.MustParseAddrPort("127.0.0.1:1"), PSK: testPSK,
			Client: []Whitelist{{Name: "w", Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
				Server: netip.MustParseAddr("10.1.0.1"), Port: 80, Streams: 2, ChunkSize: 1000,
				Peer: netip.MustParseAddrPort("127.0.0.1:2"), PeerName: "agent-b"}}}
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no key for the route's peer", func(c *Config) {
			c.AgentKey, c.PeerKeys = a.Private(), map[string][]byte{"agent-x": pub(b)}
		}, "peer agent agent-b has no public key"},
		{"short public key", func(c *Config) {
			c.AgentKey, c.PeerKeys = a.Private(), map[string][]byte{"agent-b": pub(b)[:31]}
		}, "public key of agent agent-b is 31 bytes"},
		{"peer keys without its own", func(c *Config) {
			c.PeerKeys = map[string][]byte{"agent-b": pub(b)}
		}, "agent key is 0 bytes"},
	}
	for _, c := range cases {
		cfg := base()
		c.edit(&cfg)
		if _, err := New(cfg, nil); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	cfg := base()
	cfg.AgentKey, cfg.PeerKeys = a.Private(), map[string][]byte{"agent-b": pub(b)}
	if _, err := New(cfg, nil); err != nil {
		t.Errorf("a valid configuration with per-agent keys: %v", err)
	}
}

// TestPerAgentKeyRotated: agent-a takes a new key and agent-b its new
// public key, each by a reload. Their warm pool's idle streams, keyed
// from the old pair key, are closed on both sides and opened again
// under the new one, and the next session is accelerated.
func TestPerAgentKeyRotated(t *testing.T) {
	a, a2, b := newAgentKey(t), newAgentKey(t), newAgentKey(t)
	pool := agentspec.Pool{MinIdle: 4, Max: 8}
	p := startPair(t, pairOptions{pool: pool,
		configA: func(cfg *Config) {
			cfg.AgentKey, cfg.PeerKeys = a.Private(), map[string][]byte{"agent-b": pub(b)}
		},
		configB: func(cfg *Config) {
			cfg.AgentKey, cfg.PeerKeys = b.Private(), map[string][]byte{"agent-a": pub(a)}
		}}, echo)
	full := func() bool { return onlyPool(t, p.a).Idle >= pool.MinIdle }
	testsupport.Eventually(t, 10*time.Second, "the pool filled", full)
	want := patterned(256<<10, 5)
	echoOnce(t, p, want)
	testsupport.Eventually(t, 10*time.Second, "the pool refilled", full)

	reload := func(ag *Agent, edit func(*Config)) { t.Helper(); reloadAgent(t, ag, testPSK, edit) }
	before := onlyPool(t, p.a)
	reload(p.b, func(cfg *Config) {
		cfg.AgentKey, cfg.PeerKeys = b.Private(), map[string][]byte{"agent-a": pub(a2)}
	})
	reload(p.a, func(cfg *Config) {
		cfg.AgentKey, cfg.PeerKeys = a2.Private(), map[string][]byte{"agent-b": pub(b)}
	})
	testsupport.Eventually(t, 10*time.Second, "the pool refilled under the new key", full)
	// agent-b closes the idle streams it holds under the old key (the
	// pool sees them die), agent-a those left (expired).
	if after := onlyPool(t, p.a); after.Died+after.Expired < before.Died+before.Expired+uint64(before.Idle) {
		t.Errorf("pool after the rotation %+v (before %+v): want its %d idle streams closed", after, before, before.Idle)
	}
	echoOnce(t, p, want)
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	// A pooled stream whose handshake ran across a reload may still hold
	// the old key: its BIND is refused and the session founded again
	// with a fresh hello, accelerated all the same.
	if ta.Fallbacks != 0 || tb.SessionsStarted != 2 {
		t.Errorf("after the rotation: want both sessions accelerated: client %+v, server %+v, pool %+v",
			ta, tb, onlyPool(t, p.a))
	}
}

// TestPerAgentKeyFileMixUps: a key file that holds the agent's public key
// instead of its private key, or another agent's private key, is refused
// saying which.
func TestPerAgentKeyFileMixUps(t *testing.T) {
	a, b := newAgentKey(t), newAgentKey(t)
	cfg := Config{Name: "agent-a", TransparentListen: netip.MustParseAddrPort("127.0.0.1:1"), PSK: testPSK,
		AgentKeyFile: "/etc/sosappliance/agent.key", PublicKey: pub(a), PeerKeys: map[string][]byte{"agent-b": pub(b)},
		Client: []Whitelist{{Name: "w", Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			Server: netip.MustParseAddr("10.1.0.1"), Port: 80, Streams: 2, ChunkSize: 1000,
			Peer: netip.MustParseAddrPort("127.0.0.1:2"), PeerName: "agent-b"}}}
	for _, c := range []struct {
		name string
		key  []byte
		want string
	}{
		{"its public key", pub(a), "holds agent agent-a's public key, not its private key"},
		{"another agent's private key", b.Private(), "is not agent agent-a's"},
	} {
		cfg.AgentKey = c.key
		if _, err := New(cfg, nil); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	cfg.AgentKey = a.Private()
	if _, err := New(cfg, nil); err != nil {
		t.Errorf("its own private key: %v", err)
	}
}
