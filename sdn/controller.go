// Package sdn is the OpenFlow 1.3 controller of sosappliance: it accepts
// (or dials) the declared switches, keeps each connection alive, and
// converges every switch's owned flows to the set compiled from the
// configuration, withdrawing the steering of whitelists whose agents fail
// their health checks (fail-open).
package sdn

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/internal/connlimit"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// Config configures a Controller. Zero durations take the defaults.
type Config struct {
	// Listen is where switches connect ("192.0.2.1:6653"); empty for none.
	Listen string
	// Listener, when set, is used instead of Listen (tests, socket
	// activation). Run closes it.
	Listener net.Listener
	// Dial opens connections to switches with a Connect address; default
	// net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// TLS is the server side of OpenFlow over TLS (see LoadTLS). Switches
	// with TLS set must connect with it; others may. Nil: plain TCP only.
	TLS *tls.Config
	// HandshakeTimeout bounds a connection from accept to the features
	// reply, TLS included. Default 10 s.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the connections in handshake at once, and
	// MaxHandshakesPerSource those from one address; an IPv6 /64 (one
	// host may use all its addresses) holds at most half of
	// MaxHandshakes (connlimit.PerNetwork). A connection past its
	// address's cap is closed as it is accepted; one that finds its /64's
	// places, or all places, taken takes the place of the oldest
	// handshake of the address (of that /64, or anywhere) holding the
	// most. Defaults 64 and 8.
	MaxHandshakes, MaxHandshakesPerSource int

	// Keepalive is the echo interval; a switch silent for twice as long is
	// disconnected. Default 5 s.
	Keepalive time.Duration
	// HealthInterval is how often agents are checked. Default 2 s.
	HealthInterval time.Duration
	// HealthTimeout bounds one check. Default HealthInterval.
	HealthTimeout time.Duration
	// HealthFall and HealthRise are how many consecutive failed (passed)
	// checks turn an up (down) agent down (up). Default 2 each.
	HealthFall, HealthRise int
	// ReconnectMin and ReconnectMax bound the backoff of dialed switches.
	// Defaults 250 ms and 10 s.
	ReconnectMin, ReconnectMax time.Duration
	// ResyncInterval re-reads every switch's flows to repair drift.
	// Default 60 s; negative disables.
	ResyncInterval time.Duration
	// RetryInterval is when a failed convergence is tried again. Default 5 s.
	RetryInterval time.Duration
	// ConvergeTimeout bounds one dump-diff-apply-barrier. Default 2 min.
	ConvergeTimeout time.Duration
	// RemoveFlowsOnStop deletes the owned flows of every connected switch
	// when Run ends; by default they stay (fail_mode=secure keeps them).
	RemoveFlowsOnStop bool
	// Roles makes the controller one of several sharing the switches
	// (role.go): it asks each switch for the role SetRole gives it, SLAVE
	// until then, and changes flows only as confirmed MASTER. False: no
	// role requests, the one controller converges every switch.
	Roles bool

	// Switches and Agents are the initial desired state; Update replaces
	// them.
	Switches []flows.Switch
	Agents   map[string]AgentHealth
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Keepalive, 5*time.Second)
	def(&c.HealthInterval, 2*time.Second)
	def(&c.HealthTimeout, c.HealthInterval)
	def(&c.ReconnectMin, 250*time.Millisecond)
	def(&c.ReconnectMax, 10*time.Second)
	def(&c.ResyncInterval, time.Minute)
	def(&c.RetryInterval, 5*time.Second)
	def(&c.ConvergeTimeout, 2*time.Minute)
	def(&c.HandshakeTimeout, 10*time.Second)
	if c.MaxHandshakes <= 0 {
		c.MaxHandshakes = 64
	}
	if c.MaxHandshakesPerSource <= 0 {
		c.MaxHandshakesPerSource = 8
	}
	if c.HealthFall <= 0 {
		c.HealthFall = 2
	}
	if c.HealthRise <= 0 {
		c.HealthRise = 2
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	return c
}

// Counters are cumulative, for metrics.
type Counters struct {
	FlowModsSent     uint64
	FlowModErrors    uint64
	Converges        uint64
	ConvergeFailures uint64
	Connections      uint64
	Disconnects      uint64
	DeadLinks        uint64
	Refused          uint64
	HealthChecks     uint64
	HealthFailures   uint64
	// DriftRepairs counts flow mods sent by periodic resyncs, that is,
	// repairs of flows changed on a switch behind the controller's back.
	DriftRepairs uint64
	// HandshakeOverflows counts connections closed on accept because
	// their address was at its cap, and HandshakeEvictions the handshakes
	// closed to make room under the /64's cap or MaxHandshakes; both are
	// part of Refused too.
	HandshakeOverflows, HandshakeEvictions uint64
	// RoleRequests counts role requests sent, RoleRefusals those a switch
	// refused as stale, RoleStatus the role changes switches announced.
	RoleRequests, RoleRefusals, RoleStatus uint64
}

type counters struct {
	flowModsSent, flowModErrors, converges, convergeFailures, connections, disconnects,
	deadLinks, refused, healthChecks, healthFailures, driftRepairs, handshakeOverflows, handshakeEvictions,
	roleRequests, roleRefusals, roleStatus atomic.Uint64
}

// SwitchStatus is the state of one declared switch.
type SwitchStatus struct {
	Name           string
	DatapathID     uint64
	Connected      bool
	Remote         string
	ConnectedSince time.Time
	// DesiredFlows is the size of the flow set last compiled for it, after
	// fail-open; InstalledFlows is how many owned flows it carries since
	// the last convergence.
	DesiredFlows   int
	InstalledFlows int
	// Converges counts completed convergences; LastChanges is how many flow
	// mods the last one sent.
	Converges    uint64
	LastConverge time.Time
	LastChanges  int
	// Withdrawn are the whitelists whose steering fail-open took away.
	Withdrawn []string
	// LastError is the last failure (connection, compile, switch error);
	// FlowErrors lists the changes the switch refused, offending flow
	// included.
	LastError  string
	FlowErrors []string
	// Role is what the switch confirmed of this controller's role
	// ("master", "slave"; "" without roles or before an answer), with
	// the switch's generation_id.
	Role           string
	RoleGeneration uint64
}

// AgentStatus is the health of one agent.
type AgentStatus struct {
	Name string
	// Method is "http" (GET /healthz) or "tcp" (data port reachable);
	// Target is the address checked.
	Method string
	Target string
	// Checked is false until the first check completes; an unchecked
	// agent counts as healthy.
	Checked   bool
	Healthy   bool
	Since     time.Time
	LastCheck time.Time
	LastError string
	// Sessions is how many live sessions the agent reported last (GET
	// /sessions); Shares are its part of every spread whitelist.
	Sessions int
	Shares   []Share
	// SessionsError is why its last GET /sessions was not taken (too
	// many sessions for its max_sessions, or a failed read); Sessions
	// are then those read before. Empty once one is read again.
	SessionsError string
}

// Share is an agent's part of one spread steer on one switch: Buckets of
// Of, after fail-over (a dead agent has 0, its survivors more).
type Share struct {
	Switch, Whitelist string
	Side              flows.Side
	Reverse           bool
	Buckets, Of       int
}

// Refusal is a switch the controller turned away.
type Refusal struct {
	At         time.Time
	Remote     string
	DatapathID uint64
	Reason     string
}

// Status is a snapshot of the controller.
type Status struct {
	Switches []SwitchStatus
	Agents   []AgentStatus
	// Refused are the most recent refusals, oldest first.
	Refused  []Refusal
	Counters Counters
	// Role is the role the election set (Enabled false without roles).
	Role RoleStatus
}

// Controller converges the flow tables of the declared switches.
type Controller struct {
	cfg Config
	log *slog.Logger
	// serverTLS is the listener's TLS configuration, cfg.TLS until SetTLS
	// swaps it; nil without TLS.
	serverTLS atomic.Pointer[tls.Config]

	mu       sync.Mutex
	switches map[string]flows.Switch // by name
	byDPID   map[uint64]string
	agents   map[string]*agentState
	sessions map[string]*session
	// claiming names the switches a second connection is being checked
	// for (claim): one at a time, so connections for a connected
	// datapath id cannot park in numbers past their handshake.
	claiming map[string]bool
	status   map[string]*SwitchStatus
	refused  []Refusal
	// role and generation are what SetRole set (role.go).
	role       ofp13.ControllerRole
	generation uint64
	roleSince  time.Time

	// gate is what the listener admits before it learns a datapath id.
	gate gate
	// updates counts Update calls. redeal, when not 0, is the update
	// that re-dealt a spread's buckets (an agent added or removed, or the
	// bucket count changed): until a health round that started after it
	// has read every agent's live sessions, every convergence compiles
	// the switches as they were before (pending), so that the sessions
	// whose buckets move are pinned in the convergence that moves them
	// (reDealt).
	updates, redeal uint64
	pending         map[string]flows.Switch
	// handshakes counts connections in handshake: in all, by address
	// (connlimit.AddressOf) and by IPv4 address or IPv6 /64
	// (connlimit.SourceOf); handshakeOrder holds their slots in accept
	// order.
	handshakes     int
	handshaking    map[netip.Prefix]int
	handshakingNet map[netip.Prefix]int
	handshakeOrder list.List
	lastOverflow   atomic.Int64 // unix nanoseconds of the last refuseFlood logged
	// lastAnonRefusal is when refuseAnonymous last logged (unix
	// nanoseconds), anonSuppressed how many it left out since.
	lastAnonRefusal atomic.Int64
	anonSuppressed  atomic.Uint64

	healthReady chan struct{}
	healthNow   chan struct{}
	updated     chan struct{}
	counters    counters
}

type session struct {
	conn *SwitchConn
	kick chan struct{}
	// secure is true over TLS; remote is the source address.
	secure bool
	remote netip.Addr
	// role is what the switch confirmed, under Controller.mu.
	role sessionRole
}

// gate is the union of what the switches that connect to the listener
// accept: a source outside every allow list, or plain TCP when every switch
// requires TLS, is turned away before anything is sent.
type gate struct {
	anySource bool
	allow     []netip.Prefix
	plain     bool
}

func (g gate) admits(addr netip.Addr) bool {
	return g.anySource || slices.ContainsFunc(g.allow, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// allowedFrom reports whether a switch may connect from addr.
func allowedFrom(sw flows.Switch, addr netip.Addr) bool {
	return len(sw.Allow) == 0 || slices.ContainsFunc(sw.Allow, func(p netip.Prefix) bool { return p.Contains(addr) })
}

const maxRefusals = 16

// New returns a controller for cfg; it does nothing until Run.
func New(cfg Config, log *slog.Logger) (*Controller, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{
		cfg: cfg.withDefaults(), log: log,
		agents: map[string]*agentState{}, sessions: map[string]*session{}, status: map[string]*SwitchStatus{},
		handshaking: map[netip.Prefix]int{}, handshakingNet: map[netip.Prefix]int{},
		healthReady: make(chan struct{}), healthNow: make(chan struct{}, 1), updated: make(chan struct{}, 1),
		role: ofp13.RoleSlave, roleSince: time.Now(),
	}
	c.serverTLS.Store(cfg.TLS)
	if err := c.Update(cfg.Switches, cfg.Agents); err != nil {
		return nil, err
	}
	return c, nil
}

// SetTLS gives the listener the TLS configuration read again from its
// files (a certificate, key or switch CA replaced in place) for the
// connections it accepts from now on, and looks at the connected switches
// again: those whose certificates the switch CAs in force no longer
// verify (a CA taken out, or a certificate expired since it connected)
// are dropped, as a reload drops any connection its configuration
// refuses; the others keep their sessions. It refuses to turn TLS on or
// off (that takes a new controller), and reports whether the files
// changed and how many switches it dropped.
func (c *Controller) SetTLS(conf *tls.Config) (changed bool, dropped int, err error) {
	cur := c.serverTLS.Load()
	if (cur == nil) != (conf == nil) {
		return false, 0, errors.New("TLS cannot be turned on or off in a running controller")
	}
	if conf == nil {
		return false, 0, nil
	}
	changed = !SameTLS(cur, conf)
	c.mu.Lock()
	if changed {
		c.serverTLS.Store(conf)
	}
	drop := c.refusedLocked(func(name string) string { return c.switches[name].Connect })
	c.mu.Unlock()
	for _, s := range drop {
		s.conn.Close()
	}
	return changed, len(drop), nil
}

// SameTLS says whether two listener configurations (LoadTLS) hold the
// same certificate chain and the same switch CAs.
func SameTLS(a, b *tls.Config) bool {
	if len(a.Certificates) != len(b.Certificates) || !a.ClientCAs.Equal(b.ClientCAs) {
		return false
	}
	for i := range a.Certificates {
		if !slices.EqualFunc(a.Certificates[i].Certificate, b.Certificates[i].Certificate, bytes.Equal) {
			return false
		}
	}
	return true
}

// Update replaces the desired switches and agent health targets, as on a
// configuration reload. Connected switches converge to the new flow sets
// at once; switches no longer declared are disconnected (their flows stay).
// It refuses a set in which two switches share a name or a datapath id,
// and then changes nothing.
func (c *Controller) Update(switches []flows.Switch, agents map[string]AgentHealth) error {
	byName := make(map[string]flows.Switch, len(switches))
	byDPID := make(map[uint64]string, len(switches))
	for _, sw := range switches {
		if _, dup := byName[sw.Name]; dup {
			return fmt.Errorf("switch %s is declared twice", sw.Name)
		}
		if other, dup := byDPID[sw.DatapathID]; dup {
			return fmt.Errorf("switches %s and %s share datapath id %s", other, sw.Name, DatapathIDString(sw.DatapathID))
		}
		if sw.Connect != "" {
			if _, err := parseTarget(sw.Connect); err != nil {
				return fmt.Errorf("switch %s: %w", sw.Name, err)
			}
		}
		if sw.TLS && sw.Connect != "" {
			return fmt.Errorf("switch %s: TLS is for switches that connect to the listener, not for one the controller dials", sw.Name)
		}
		if sw.TLS && c.serverTLS.Load() == nil {
			return fmt.Errorf("switch %s requires TLS, but the controller has no TLS configuration", sw.Name)
		}
		if sw.TLSName != "" && !sw.TLS {
			return fmt.Errorf("switch %s: a certificate name needs TLS", sw.Name)
		}
		byName[sw.Name], byDPID[sw.DatapathID] = sw, sw.Name
	}
	g := gate{}
	for _, sw := range byName {
		if sw.Connect != "" {
			continue
		}
		g.anySource = g.anySource || len(sw.Allow) == 0
		g.allow = append(g.allow, sw.Allow...)
		g.plain = g.plain || !sw.TLS
	}
	c.mu.Lock()
	old := c.switches
	c.switches, c.byDPID, c.gate = byName, byDPID, g
	for name, st := range c.agents {
		if _, ok := agents[name]; !ok {
			delete(c.agents, name)
		} else {
			st.retarget(agents[name])
		}
	}
	for name, h := range agents {
		if _, ok := c.agents[name]; !ok {
			c.agents[name] = &agentState{target: h}
		}
	}
	for name := range c.status {
		if _, ok := byName[name]; !ok {
			delete(c.status, name)
		}
	}
	for name, sw := range byName {
		if c.status[name] == nil {
			c.status[name] = &SwitchStatus{Name: name}
		}
		c.status[name].DatapathID = sw.DatapathID
	}
	drop := c.refusedLocked(func(name string) string { return old[name].Connect })
	c.updates++
	if c.redeal != 0 || reDealt(old, byName) {
		// The health round signalled below converges the switches;
		// until then they keep the set in force before.
		if c.redeal == 0 {
			c.pending = old
		}
		c.redeal = c.updates
	} else {
		c.kickLocked()
	}
	c.mu.Unlock()
	for _, s := range drop {
		s.conn.Close()
	}
	signal(c.updated)
	signal(c.healthNow)
	return nil
}

// refusedLocked takes out of c.sessions those the configuration now in
// force refuses (connectOf says at which target each was dialed) and marks
// them disconnected; the caller closes them once c.mu is released.
func (c *Controller) refusedLocked(connectOf func(name string) string) []*session {
	var drop []*session
	for name, s := range c.sessions {
		if why := c.refusalLocked(s.conn, name, connectOf(name), s.secure); why != "" {
			drop = append(drop, s)
			delete(c.sessions, name)
			// The session's own exit no longer owns the status.
			if st := c.status[name]; st != nil {
				st.Connected, st.Role = false, ""
				st.LastError = "disconnected: the reloaded configuration does not accept this connection (" + why + ")"
			}
		}
	}
	return drop
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *Controller) kickLocked() {
	for _, s := range c.sessions {
		signal(s.kick)
	}
}

// Run serves until ctx ends: it accepts switches on the listener, dials the
// switches that have a Connect address, checks agent health and keeps every
// connected switch converged. It returns nil when ctx ends, or an error if
// the listener cannot be opened.
func (c *Controller) Run(ctx context.Context) error {
	ln := c.cfg.Listener
	if ln == nil && c.cfg.Listen != "" {
		var err error
		if ln, err = net.Listen("tcp", c.cfg.Listen); err != nil {
			return fmt.Errorf("openflow listen: %w", err)
		}
	}
	// Sessions outlive ctx briefly so that RemoveFlowsOnStop can use them.
	sessCtx, stopSessions := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSessions()
	var wg sync.WaitGroup
	if ln != nil {
		c.log.Info("openflow controller listening", "addr", ln.Addr().String())
		wg.Go(func() { c.acceptLoop(sessCtx, ln) })
	}
	wg.Go(func() { c.healthLoop(sessCtx) })

	dialers := map[string]*dialer{}
	reconcile := func() {
		c.mu.Lock()
		want := map[string]string{}
		for name, sw := range c.switches {
			if sw.Connect != "" {
				want[name] = sw.Connect
			}
		}
		c.mu.Unlock()
		for name, d := range dialers {
			if want[name] != d.target {
				d.cancel()
				delete(dialers, name)
			}
		}
		for name, target := range want {
			if dialers[name] == nil {
				dctx, cancel := context.WithCancel(sessCtx)
				dialers[name] = &dialer{target: target, cancel: cancel}
				wg.Go(func() { c.dialLoop(dctx, name, target) })
			}
		}
	}
	reconcile()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-c.updated:
			reconcile()
		}
	}
	if ln != nil {
		ln.Close()
	}
	if c.cfg.RemoveFlowsOnStop {
		c.removeAllOwnedFlows()
	}
	stopSessions()
	wg.Wait()
	return nil
}

type dialer struct {
	target string
	cancel context.CancelFunc
}

func (c *Controller) removeAllOwnedFlows() {
	c.mu.Lock()
	sessions := make(map[string]*session, len(c.sessions))
	for k, v := range c.sessions {
		sessions[k] = v
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for name, s := range sessions {
		if !c.mayWrite(s) {
			c.log.Info("not removing owned flows on stop: this controller is not the switch's master", "switch", name)
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.conn.retire()
			if err := s.conn.RemoveOwnedFlows(ctx); err != nil {
				c.log.Warn("removing owned flows on stop failed", "switch", name, "err", err)
			} else {
				c.log.Info("removed owned flows on stop", "switch", name)
			}
		})
	}
	wg.Wait()
}

func (c *Controller) connOptions() (ConnOptions, *roleSink) {
	sink := &roleSink{}
	return ConnOptions{
		Keepalive: c.cfg.Keepalive,
		Dial:      c.cfg.Dial,
		Logger:    c.log,
		OnFlowMods: func(n int) {
			c.counters.flowModsSent.Add(uint64(n))
		},
		OnMessage: func(m ofp13.Message) {
			if rs, ok := m.(*ofp13.RoleStatus); ok {
				c.onRoleStatus(sink, rs)
				return
			}
			c.log.Debug("asynchronous message from switch", "type", m.MessageType().String())
		},
	}, sink
}

func (c *Controller) acceptLoop(ctx context.Context, ln net.Listener) {
	defer closeWhenDone(ctx, ln)()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			c.log.Warn("openflow accept failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		remote := addrOf(conn.RemoteAddr())
		c.mu.Lock()
		g := c.gate
		c.mu.Unlock()
		if !g.admits(remote) {
			// Before a single byte goes out: not even a hello.
			conn.Close()
			c.refuseFlood(conn.RemoteAddr().String(), "source address is on no switch's allow list")
			continue
		}
		slot, victim := c.admitHandshake(remote, conn)
		if slot == nil {
			conn.Close()
			c.counters.handshakeOverflows.Add(1)
			c.refuseFlood(conn.RemoteAddr().String(), fmt.Sprintf("too many handshakes at once from its address (at most %d)",
				c.cfg.MaxHandshakesPerSource))
			continue
		}
		if victim != nil {
			if victim.conn != nil {
				victim.conn.Close()
			}
			c.counters.handshakeEvictions.Add(1)
			c.refuseFlood(addrString(victim.conn), fmt.Sprintf(
				"handshake places full (%d in all, %d per IPv6 /64): the oldest handshake of the busiest address closed for %s",
				c.cfg.MaxHandshakes, connlimit.PerNetwork(c.cfg.MaxHandshakesPerSource, c.cfg.MaxHandshakes), conn.RemoteAddr()))
		}
		wg.Go(func() { c.serveConn(ctx, conn, slot, g.plain) })
	}
}

// addrString is a connection's remote address as logs show it.
func addrString(c net.Conn) string {
	if c == nil {
		return ""
	}
	return c.RemoteAddr().String()
}

func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}

// handshakeSlot is one accepted connection's place while it is in
// handshake.
type handshakeSlot struct {
	conn net.Conn
	// src is its address (connlimit.AddressOf), net its IPv4 address or
	// IPv6 /64 (connlimit.SourceOf).
	src, net netip.Prefix
	elem     *list.Element
	// gone: the slot was given back, or taken for a newer connection
	// (evicted, and its connection closed by the accept loop).
	gone, evicted bool
}

// admitHandshake takes a handshake place for conn, from addr. It returns
// nil when addr's address is at its cap (MaxHandshakesPerSource). When
// addr's IPv6 /64 is at its cap, it takes the place of the oldest
// handshake of the address of that /64 holding the most; when every place
// is taken, of the address holding the most anywhere; and it returns that
// handshake as victim for the caller to close. A switch's handshake takes
// a round trip or two and one address each, while a connection that
// holds its place waits out the handshake timeout: a flood from few
// addresses holds the most at each, and one from many addresses holding
// one each loses its oldest first.
func (c *Controller) admitHandshake(addr netip.Addr, conn net.Conn) (slot, victim *handshakeSlot) {
	src, srcNet := connlimit.AddressOf(addr), connlimit.SourceOf(addr)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.handshaking[src] >= c.cfg.MaxHandshakesPerSource:
		return nil, nil
	case c.handshakingNet[srcNet] >= connlimit.PerNetwork(c.cfg.MaxHandshakesPerSource, c.cfg.MaxHandshakes):
		victim = c.oldestOfBusiestLocked(func(p *handshakeSlot) bool { return p.net == srcNet })
	case c.handshakes >= c.cfg.MaxHandshakes:
		victim = c.oldestOfBusiestLocked(func(*handshakeSlot) bool { return true })
	}
	if victim != nil {
		victim.evicted = true
		c.dropHandshakeLocked(victim)
	}
	slot = &handshakeSlot{conn: conn, src: src, net: srcNet}
	slot.elem = c.handshakeOrder.PushBack(slot)
	c.handshakes++
	c.handshaking[src]++
	c.handshakingNet[srcNet]++
	return slot, victim
}

// oldestOfBusiestLocked is the oldest handshake of the address holding
// the most handshakes among those in selects, or nil when it selects none.
func (c *Controller) oldestOfBusiestLocked(in func(*handshakeSlot) bool) *handshakeSlot {
	var victim *handshakeSlot
	most := 0
	for e := c.handshakeOrder.Front(); e != nil; e = e.Next() {
		if p := e.Value.(*handshakeSlot); in(p) && c.handshaking[p.src] > most {
			victim, most = p, c.handshaking[p.src]
		}
	}
	return victim
}

func (c *Controller) dropHandshakeLocked(p *handshakeSlot) {
	p.gone = true
	c.handshakeOrder.Remove(p.elem)
	c.handshakes--
	connlimit.Dec(c.handshaking, p.src)
	connlimit.Dec(c.handshakingNet, p.net)
}

// releaseHandshake gives a slot's place back. It reports false when the
// slot was evicted for a newer connection, whose closing of this one may
// still be on its way: the connection is not to be used.
func (c *Controller) releaseHandshake(p *handshakeSlot) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !p.gone {
		c.dropHandshakeLocked(p)
	}
	return !p.evicted
}

// tlsRecord is the first byte of a TLS handshake record; OpenFlow's first
// byte is its version, 0x01 to 0x06.
const tlsRecord = 0x16

// serveConn authenticates one accepted connection (TLS when it starts
// with a TLS record), negotiates OpenFlow, checks the switch against its
// declaration and runs its session.
func (c *Controller) serveConn(ctx context.Context, conn net.Conn, slot *handshakeSlot, plainOK bool) {
	defer c.releaseHandshake(slot)
	hctx, cancel := context.WithTimeout(ctx, c.cfg.HandshakeTimeout)
	defer cancel()
	peer := conn.RemoteAddr().String()
	// refuse refuses the connection in handshake, unless it was evicted:
	// the accept loop counted and logged that, at most once a second.
	refuse := func(dpid uint64, format string, args ...any) {
		conn.Close()
		if c.releaseHandshake(slot) {
			c.refuseAnonymous(peer, dpid, fmt.Sprintf(format, args...))
		}
	}
	conn, secure, err := secure(hctx, conn, c.serverTLS.Load())
	if err != nil {
		refuse(0, "%v", err)
		return
	}
	if !secure && !plainOK {
		refuse(0, "plain TCP, and every switch that connects here requires TLS")
		return
	}
	opts, sink := c.connOptions()
	opts.HandshakeTimeout = c.cfg.HandshakeTimeout
	sc, err := Handshake(hctx, conn, opts)
	if err != nil {
		refuse(0, "handshake failed: %v", err)
		return
	}
	if !c.releaseHandshake(slot) {
		sc.Close()
		return
	}
	dpid := sc.DatapathID()
	c.mu.Lock()
	name, ok := c.byDPID[dpid]
	sw := c.switches[name]
	reason := ""
	switch {
	case !ok:
		reason = fmt.Sprintf("datapath id %s is not declared in the configuration", DatapathIDString(dpid))
	case sw.Connect != "":
		// Two sessions for one switch would keep closing each other.
		reason = fmt.Sprintf("switch %s is dialed at %s; it must not also connect to the listener", name, sw.Connect)
	default:
		reason = c.refusalLocked(sc, name, "", secure)
	}
	c.mu.Unlock()
	switch {
	case reason != "" && !ok:
		c.refuseAnonymous(sc.RemoteAddr(), dpid, reason)
	case reason != "":
		c.refuse(sc.RemoteAddr(), dpid, reason)
	}
	if reason != "" {
		sc.Close()
		return
	}
	c.runSession(ctx, sc, name, "", secure, sink)
}

// secure looks at the first byte of conn and, when it opens a TLS record,
// returns the TLS connection after the handshake, the switch's certificate
// verified against serverTLS; otherwise conn as it was. Either way the
// connection returned reads from the first byte.
func secure(ctx context.Context, conn net.Conn, serverTLS *tls.Config) (net.Conn, bool, error) {
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetReadDeadline(d); err != nil {
			return conn, false, err
		}
	}
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		return conn, false, fmt.Errorf("read first byte: %w", err)
	}
	peeked := &peekedConn{Conn: conn, first: first[:]}
	if first[0] != tlsRecord {
		return peeked, false, nil
	}
	if serverTLS == nil {
		return peeked, false, errors.New("TLS, and this controller has no TLS configuration")
	}
	tc := tls.Server(peeked, serverTLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return peeked, false, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, true, nil
}

// peekedConn gives back the bytes read to tell TLS from plain OpenFlow.
type peekedConn struct {
	net.Conn
	first []byte
}

func (p *peekedConn) Read(b []byte) (int, error) {
	if len(p.first) > 0 {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// maxFlowErrorsShown is how many refused changes of one convergence are
// logged and listed in its switch's status.
const maxFlowErrorsShown = 20

func (c *Controller) refuse(remote string, dpid uint64, reason string) {
	c.log.Warn("refusing switch", "remote", remote, "datapath_id", DatapathIDString(dpid), "reason", reason)
	c.record(remote, dpid, reason)
}

// refuseAnonymous refuses a connection in its handshake, before it named
// a datapath id, or for one it named that no switch declares: anyone who
// reaches the listener can cause any number of these, so they are logged
// at most once a second, with the count of the ones left out. Each is
// counted and listed in the status.
func (c *Controller) refuseAnonymous(remote string, dpid uint64, reason string) {
	now := time.Now().UnixNano()
	if last := c.lastAnonRefusal.Load(); now-last > int64(time.Second) && c.lastAnonRefusal.CompareAndSwap(last, now) {
		c.log.Warn("refusing switch", "remote", remote, "datapath_id", DatapathIDString(dpid), "reason", reason,
			"suppressed", c.anonSuppressed.Swap(0))
	} else {
		c.anonSuppressed.Add(1)
	}
	c.record(remote, dpid, reason)
}

// refuseFlood refuses a connection at accept, where anyone can cause any
// number of refusals: it logs at most one a second.
func (c *Controller) refuseFlood(remote, reason string) {
	if now := time.Now().UnixNano(); now-c.lastOverflow.Load() > int64(time.Second) {
		c.lastOverflow.Store(now)
		c.log.Warn("refusing switch connection on accept (further ones logged at most once a second)", "remote", remote, "reason", reason)
	}
	c.record(remote, 0, reason)
}

func (c *Controller) record(remote string, dpid uint64, reason string) {
	c.counters.refused.Add(1)
	c.mu.Lock()
	c.refused = append(c.refused, Refusal{At: time.Now(), Remote: remote, DatapathID: dpid, Reason: reason})
	if len(c.refused) > maxRefusals {
		c.refused = c.refused[len(c.refused)-maxRefusals:]
	}
	c.mu.Unlock()
}

func (c *Controller) dialLoop(ctx context.Context, name, target string) {
	backoff := c.cfg.ReconnectMin
	for ctx.Err() == nil {
		started := time.Now()
		opts, sink := c.connOptions()
		sc, err := Dial(ctx, target, opts)
		if err == nil {
			c.mu.Lock()
			want := c.switches[name].DatapathID
			c.mu.Unlock()
			if sc.DatapathID() != want {
				c.refuse(sc.RemoteAddr(), sc.DatapathID(), fmt.Sprintf("switch %s at %s reports datapath id %s, configuration says %s",
					name, target, DatapathIDString(sc.DatapathID()), DatapathIDString(want)))
				sc.Close()
			} else {
				c.runSession(ctx, sc, name, target, false, sink)
			}
		} else if ctx.Err() == nil {
			c.setError(name, err)
			c.log.Warn("cannot reach switch", "switch", name, "target", target, "err", err, "retry_in", backoff)
		}
		// A session that lasted resets the backoff; a flapping one does not.
		if time.Since(started) > 10*c.cfg.ReconnectMin+c.cfg.Keepalive {
			backoff = c.cfg.ReconnectMin
		}
		jitter := time.Duration(rand.Int64N(int64(backoff)/4 + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + jitter):
		}
		backoff = min(2*backoff, c.cfg.ReconnectMax)
	}
}

func (c *Controller) setError(name string, err error) {
	c.mu.Lock()
	if st := c.status[name]; st != nil {
		st.LastError = err.Error()
	}
	c.mu.Unlock()
}

// claim decides whether sc may take over the session of switch name: yes
// when there is none, or when the connected one no longer answers an echo
// within the keepalive interval (a switch that restarted). A second
// connection for a switch that still answers is refused, so whoever claims
// a connected datapath id cannot knock the switch off; so is one that
// comes while another is being checked for the same switch, so such
// connections cannot pile up after their handshake slot is released. It
// returns with c.mu held when sc may proceed.
func (c *Controller) claim(ctx context.Context, sc *SwitchConn, name string) bool {
	c.mu.Lock()
	for {
		prev := c.sessions[name]
		if prev == nil {
			return true
		}
		if c.claiming[name] {
			c.mu.Unlock()
			c.refuse(sc.RemoteAddr(), sc.DatapathID(), fmt.Sprintf("switch %s is connected from %s and another connection for its datapath id is being checked; this one is refused",
				name, prev.conn.RemoteAddr()))
			sc.Close()
			return false
		}
		if c.claiming == nil {
			c.claiming = make(map[string]bool)
		}
		c.claiming[name] = true
		c.mu.Unlock()
		asked := time.Now()
		pctx, cancel := context.WithTimeout(ctx, c.cfg.Keepalive)
		_, err := prev.conn.Echo(pctx)
		cancel()
		if err != nil && prev.conn.heardSince(asked) {
			// Busy, not silent: its echo's answer waits behind what
			// it works through.
			err = nil
		}
		c.mu.Lock()
		delete(c.claiming, name)
		if err == nil {
			c.mu.Unlock()
			c.refuse(sc.RemoteAddr(), sc.DatapathID(), fmt.Sprintf("switch %s is already connected from %s and answers; a second connection for its datapath id is refused",
				name, prev.conn.RemoteAddr()))
			sc.Close()
			return false
		}
		if c.sessions[name] == prev {
			c.log.Warn("switch connects again while its previous connection is silent; replacing it",
				"switch", name, "previous", prev.conn.RemoteAddr(), "remote", sc.RemoteAddr(), "err", err)
			return true
		}
		// The previous session ended meanwhile and another connection
		// took over: ask that one.
	}
}

// refusalLocked says why the configuration now in force refuses sc as
// switch name's connection ("" when it accepts it): connect is the target
// it was dialed at, "" for a connection to the listener. serveConn checks
// a connection before its claim, which may wait up to a keepalive; a
// reload meanwhile is checked here again, as Update checks the sessions
// it finds registered.
func (c *Controller) refusalLocked(sc *SwitchConn, name, connect string, secure bool) string {
	sw, ok := c.switches[name]
	remote := addrOf(sc.conn.RemoteAddr())
	switch {
	case !ok:
		return fmt.Sprintf("switch %s is no longer declared", name)
	case sw.DatapathID != sc.DatapathID():
		return fmt.Sprintf("switch %s has datapath id %s now", name, DatapathIDString(sw.DatapathID))
	case sw.Connect != connect:
		return fmt.Sprintf("switch %s is reached at %q now", name, sw.Connect)
	case sw.TLS && !secure:
		return fmt.Sprintf("switch %s must connect over TLS", name)
	case connect == "" && !allowedFrom(sw, remote):
		return fmt.Sprintf("switch %s may not connect from %s", name, remote)
	}
	if conf := c.serverTLS.Load(); conf != nil && secure {
		if why := certUntrusted(sc.conn, conf.ClientCAs); why != "" {
			return fmt.Sprintf("switch %s: %s", name, why)
		}
	}
	return certMismatch(sw, sc.conn)
}

// runSession keeps one connected switch converged until the connection or
// ctx ends; connect is the target it was dialed at ("" for a connection
// to the listener).
func (c *Controller) runSession(ctx context.Context, sc *SwitchConn, name, connect string, secure bool, sink *roleSink) {
	if !c.claim(ctx, sc, name) {
		return
	}
	if why := c.refusalLocked(sc, name, connect, secure); why != "" {
		c.mu.Unlock()
		c.refuse(sc.RemoteAddr(), sc.DatapathID(), why)
		sc.Close()
		return
	}
	s := &session{conn: sc, kick: make(chan struct{}, 1), secure: secure, remote: addrOf(sc.conn.RemoteAddr())}
	sink.s.Store(s)
	log := c.log.With("switch", name, "remote", sc.RemoteAddr())
	prev := c.sessions[name]
	c.sessions[name] = s
	if st := c.status[name]; st != nil {
		st.Connected, st.Remote, st.ConnectedSince, st.LastError = true, sc.RemoteAddr(), time.Now(), ""
		st.Role, st.RoleGeneration = "", 0
	}
	c.mu.Unlock()
	if prev != nil {
		log.Info("switch reconnected; closing its previous connection")
		prev.conn.Close()
	}
	c.counters.connections.Add(1)
	log.Info("switch connected", "datapath_id", DatapathIDString(sc.DatapathID()))
	defer func() {
		sc.Close()
		c.counters.disconnects.Add(1)
		reason := sc.Err()
		if errors.Is(reason, ErrDeadLink) {
			c.counters.deadLinks.Add(1)
		}
		c.mu.Lock()
		if c.sessions[name] == s {
			delete(c.sessions, name)
			if st := c.status[name]; st != nil {
				st.Connected = false
				st.Role = ""
				if reason != nil && !errors.Is(reason, ErrClosed) {
					st.LastError = "disconnected: " + reason.Error()
				}
			}
		}
		c.mu.Unlock()
		log.Info("switch disconnected", "reason", reason)
	}()

	// Converge only once agent health is known, so that a restart with
	// healthy agents does not withdraw and re-add steering.
	select {
	case <-c.healthReady:
	case <-ctx.Done():
		return
	case <-sc.Done():
		return
	}
	signal(s.kick)
	var resync <-chan time.Time
	if c.cfg.ResyncInterval > 0 {
		t := time.NewTicker(c.cfg.ResyncInterval)
		defer t.Stop()
		resync = t.C
	}
	var retry <-chan time.Time
	for {
		fromResync := false
		select {
		case <-ctx.Done():
			return
		case <-sc.Done():
			return
		case <-s.kick:
		case <-resync:
			fromResync = true
		case <-retry:
		}
		retry = nil
		// Only the master changes flows; a slave reads, and keeps its
		// role request answered.
		master, err := c.ensureRole(ctx, s, name, log)
		if err != nil && sc.Err() == nil {
			retry = time.After(c.cfg.RetryInterval)
		}
		if !master {
			continue
		}
		sent, err := c.converge(ctx, sc, name, log)
		if fromResync && sent > 0 {
			c.counters.driftRepairs.Add(uint64(sent))
			log.Warn("repaired flows changed behind the controller's back", "flow_mods", sent)
		}
		if err != nil && sc.Err() == nil {
			retry = time.After(c.cfg.RetryInterval)
		}
	}
}

// desiredFor compiles the flow set of a switch with fail-open applied.
func (c *Controller) desiredFor(name string) ([]flows.Flow, []string, error) {
	c.mu.Lock()
	sw, ok := c.switches[name]
	if before, had := c.pending[name]; had && ok {
		sw = before // a re-deal waits for its health round
	}
	var withdrawn []string
	if ok {
		sw, withdrawn = flows.FailOpen(sw, c.downLocked)
		sw = flows.PinSessions(sw, c.heldLocked())
	}
	c.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("switch %s is no longer declared", name)
	}
	desired, err := flows.Compile(sw)
	return desired, withdrawn, err
}

// downLocked is the health the flows follow: an agent is down once its
// checks failed (an unchecked agent counts as up). flows.FailOpen turns it
// into each site's live agents: a dead agent's buckets go to the live
// ones, and a whitelist fails open only when a site has none left.
func (c *Controller) downLocked(agent string) bool {
	st := c.agents[agent]
	return st != nil && st.checked && !st.healthy
}

// sharesLocked is every agent's part of the spread steers, as the switches
// now carry them (after fail-over).
func (c *Controller) sharesLocked() map[string][]Share {
	out := map[string][]Share{}
	for _, name := range slices.Sorted(maps.Keys(c.switches)) {
		sw, _ := flows.FailOpen(c.switches[name], c.downLocked)
		for _, st := range sw.Steers {
			if len(st.Agents) == 0 {
				continue
			}
			up := make([]bool, len(st.Agents))
			for i, a := range st.Agents {
				up[i] = !slices.Contains(st.Down, a.Name)
			}
			b, err := spread.Assign(st.Spread, st.SpreadBits, len(st.Agents), up)
			if err != nil {
				continue
			}
			for i, a := range st.Agents {
				out[a.Name] = append(out[a.Name], Share{Switch: name, Whitelist: st.Whitelist, Side: st.Side, Reverse: st.Reverse,
					Buckets: b.Count(i), Of: len(b.Owner)})
			}
		}
	}
	return out
}

// heldLocked maps every healthy agent to the live sessions it reported:
// PinSessions keeps those a survivor holds in buckets handed back to a
// returning agent on the survivor.
func (c *Controller) heldLocked() map[string][]flows.Held {
	held := map[string][]flows.Held{}
	for name, st := range c.agents {
		if len(st.held) > 0 && (!st.checked || st.healthy) {
			held[name] = st.held
		}
	}
	return held
}

// converge brings one switch to its desired flows and returns how many flow
// mods it sent.
func (c *Controller) converge(ctx context.Context, sc *SwitchConn, name string, log *slog.Logger) (int, error) {
	desired, withdrawn, err := c.desiredFor(name)
	if err != nil {
		// Never converge to a set we could not compile: that would wipe.
		c.counters.convergeFailures.Add(1)
		c.setError(name, err)
		log.Error("cannot compile flows; leaving the switch as it is", "err", err)
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConvergeTimeout)
	defer cancel()
	res, err := ConvergeOnce(ctx, sc, desired)
	if errors.Is(err, errRetired) {
		return res.Sent, err // the controller is stopping: not a failure
	}
	c.counters.converges.Add(1)
	c.counters.flowModErrors.Add(uint64(len(res.Failed)))
	// A switch can refuse every change of a large convergence, each
	// time it is retried: the log and the status name the first few.
	var flowErrs []string
	for i, fe := range res.Failed {
		if i == maxFlowErrorsShown {
			more := fmt.Sprintf("and %d more refused changes", len(res.Failed)-i)
			flowErrs = append(flowErrs, more)
			log.Warn("switch refused further flow changes, not listed", "count", len(res.Failed)-i)
			break
		}
		flowErrs = append(flowErrs, fe.Error())
		log.Warn("switch refused a flow change", "err", fe.Unwrap().Error(), "change", fe.Change.String())
	}
	c.mu.Lock()
	if st := c.status[name]; st != nil {
		st.DesiredFlows = len(desired)
		st.Withdrawn = withdrawn
		st.LastChanges = res.Sent
		st.FlowErrors = flowErrs
		if err == nil {
			st.InstalledFlows = len(desired)
			st.LastError = ""
		} else {
			st.LastError = err.Error()
		}
		st.LastConverge = time.Now()
		st.Converges++
	}
	c.mu.Unlock()
	if err != nil {
		c.counters.convergeFailures.Add(1)
		// Refusals alone were logged above, one by one; what ended a
		// convergence early is logged here.
		if _, refusedOnly := err.(*RefusedError); !refusedOnly {
			log.Warn("convergence failed", "err", err)
		}
		return res.Sent, err
	}
	if res.Sent > 0 {
		log.Info("switch converged", "added", len(res.Changes.Add), "modified", len(res.Changes.Modify),
			"deleted", len(res.Changes.Delete), "flows", len(desired), "withdrawn", withdrawn)
		for i, ch := range res.Changes.List() {
			if i == 50 {
				log.Debug("further changes not logged", "count", res.Changes.Len()-i)
				break
			}
			log.Debug("flow change", "change", ch.String())
		}
	}
	return res.Sent, nil
}

// PlanSwitch diffs the flows sw must carry against what the connected
// switch of that name carries now, sending nothing; a convergence under
// way on it ends first. connected is false when the switch is not
// connected to this controller.
func (c *Controller) PlanSwitch(ctx context.Context, sw flows.Switch) (changes flows.Changes, connected bool, err error) {
	c.mu.Lock()
	s := c.sessions[sw.Name]
	c.mu.Unlock()
	if s == nil {
		return flows.Changes{}, false, nil
	}
	desired, err := flows.Compile(sw)
	if err != nil {
		return flows.Changes{}, true, err
	}
	changes, err = s.conn.planSettled(ctx, desired)
	return changes, true, err
}

func (c *Controller) healthLoop(ctx context.Context) {
	c.healthRound(ctx)
	close(c.healthReady)
	t := time.NewTicker(c.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.healthNow:
		}
		if c.healthRound(ctx) {
			c.mu.Lock()
			c.kickLocked()
			c.mu.Unlock()
		}
	}
}

// healthRound checks every agent at once and reports whether any agent
// went up or down.
func (c *Controller) healthRound(ctx context.Context) bool {
	c.mu.Lock()
	targets := make(map[string]AgentHealth, len(c.agents))
	for name, st := range c.agents {
		h := st.target
		h.MaxSessions = st.sessionCap()
		targets[name] = h
	}
	startedAfter := c.updates
	c.mu.Unlock()
	type result struct {
		name    string
		err     error
		held    []flows.Held
		heldErr error
	}
	results := make(chan result, len(targets))
	for name, h := range targets {
		go func() {
			r := result{name: name, err: checkAgent(ctx, h, c.cfg.HealthTimeout)}
			if r.err == nil {
				// A failed read keeps the sessions read before.
				r.held, r.heldErr = agentSessions(ctx, h, c.cfg.HealthTimeout)
			}
			results <- r
		}()
	}
	changed := false
	now := time.Now()
	for range targets {
		r := <-results
		c.counters.healthChecks.Add(1)
		if r.err != nil {
			c.counters.healthFailures.Add(1)
		}
		c.mu.Lock()
		st := c.agents[r.name]
		flipped := st != nil && st.observe(r.err, now, c.cfg.HealthRise, c.cfg.HealthFall)
		if flipped && !st.healthy {
			// Down: its pins go (heldLocked), and are read afresh when it
			// is back, not taken from before the outage; so does what
			// was wrong with its last report.
			st.held = nil
			st.heldErr, st.heldErrText = "", ""
		}
		// A failed check keeps the sessions read before (the agent's
		// pins go with it only once it is down), as does a failed read.
		if st != nil && r.err == nil && r.heldErr == nil {
			if st.setHeld(r.held) {
				changed = true
			}
			if len(r.held) <= st.target.MaxSessions {
				st.capBefore = 0 // the reload's lower cap holds now
			}
		}
		heldErrChanged := st != nil && r.err == nil && st.setHeldErr(r.heldErr)
		c.mu.Unlock()
		switch {
		case heldErrChanged && r.heldErr != nil:
			c.log.Warn("cannot read the agent's live sessions; keeping those read before (logged once until it changes)", "agent", r.name, "err", r.heldErr)
		case heldErrChanged:
			c.log.Info("reading the agent's live sessions again", "agent", r.name)
		}
		if flipped {
			changed = true
			if r.err != nil {
				c.log.Warn("agent down: withdrawing the steering of its whitelists", "agent", r.name, "err", r.err)
				// Fail over now, not when the round's slowest check
				// returns (up to the health timeout later): the dead
				// agent's share gets no new connections meanwhile. A
				// return waits for the round's end, so that the pins read
				// from the survivors this round are in its flows.
				c.mu.Lock()
				c.kickLocked()
				c.mu.Unlock()
			} else {
				c.log.Info("agent up: restoring the steering of its whitelists", "agent", r.name)
			}
		}
	}
	c.mu.Lock()
	if c.redeal != 0 && c.redeal <= startedAfter {
		// The sessions of the update that re-dealt buckets are read.
		c.redeal, c.pending = 0, nil
		changed = true
	}
	c.mu.Unlock()
	return changed
}

// reDealt reports whether a steer that both old and new switches carry
// deals its buckets differently in new: other agents, or another bucket
// count or spread mode. The sessions an agent holds in a bucket dealt
// away from it keep their path only through a pin (flows.PinSessions).
func reDealt(old, new map[string]flows.Switch) bool {
	type key struct {
		sw, whitelist string
		side          flows.Side
		reverse       bool
	}
	deal := func(st flows.Steer) string {
		names := []string{st.Agent.Name}
		if len(st.Agents) > 0 {
			names = names[:0]
			for _, a := range st.Agents {
				names = append(names, a.Name)
			}
		}
		return fmt.Sprint(names, st.Spread, st.SpreadBits)
	}
	was := map[key]string{}
	for name, sw := range old {
		for _, st := range sw.Steers {
			was[key{name, st.Whitelist, st.Side, st.Reverse}] = deal(st)
		}
	}
	for name, sw := range new {
		for _, st := range sw.Steers {
			if d, ok := was[key{name, st.Whitelist, st.Side, st.Reverse}]; ok && d != deal(st) {
				return true
			}
		}
	}
	return false
}

// Status returns a snapshot, switches and agents sorted by name.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Status
	for _, st := range c.status {
		cp := *st
		cp.Withdrawn = slices.Clone(st.Withdrawn)
		cp.FlowErrors = slices.Clone(st.FlowErrors)
		s.Switches = append(s.Switches, cp)
	}
	slices.SortFunc(s.Switches, func(a, b SwitchStatus) int { return cmp.Compare(a.Name, b.Name) })
	shares := c.sharesLocked()
	for name, st := range c.agents {
		s.Agents = append(s.Agents, AgentStatus{Name: name, Method: st.target.Method(), Target: st.target.Target(),
			Checked: st.checked, Healthy: !st.checked || st.healthy, Since: st.since, LastCheck: st.lastCheck, LastError: st.lastErr,
			Sessions: len(st.held), Shares: shares[name], SessionsError: st.heldErrText})
	}
	slices.SortFunc(s.Agents, func(a, b AgentStatus) int { return cmp.Compare(a.Name, b.Name) })
	s.Refused = slices.Clone(c.refused)
	k := &c.counters
	s.Counters = Counters{
		FlowModsSent: k.flowModsSent.Load(), FlowModErrors: k.flowModErrors.Load(), Converges: k.converges.Load(),
		ConvergeFailures: k.convergeFailures.Load(), Connections: k.connections.Load(), Disconnects: k.disconnects.Load(),
		DeadLinks: k.deadLinks.Load(), Refused: k.refused.Load(), HealthChecks: k.healthChecks.Load(),
		HealthFailures: k.healthFailures.Load(), DriftRepairs: k.driftRepairs.Load(),
		HandshakeOverflows: k.handshakeOverflows.Load(), HandshakeEvictions: k.handshakeEvictions.Load(),
		RoleRequests: k.roleRequests.Load(), RoleRefusals: k.roleRefusals.Load(), RoleStatus: k.roleStatus.Load(),
	}
	s.Role = RoleStatus{Enabled: c.cfg.Roles, Role: c.role.String(), Generation: c.generation, Since: c.roleSince}
	return s
}
