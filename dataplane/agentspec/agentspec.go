// Package agentspec is the vocabulary of one agent's relay: its listeners,
// identity, whitelist routes, limits and socket settings, and the one set
// of defaults of those limits. appliance/desired compiles a Relay from the
// configuration and dataplane/relay runs it (relay.Config is this Relay).
// The package does no I/O, so the pure layers can import it.
package agentspec

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/portrange"
)

// Encryption values of Relay.Encryption.
const (
	EncryptionAESGCM = "aes-256-gcm"
	EncryptionNone   = "none"
)

// Relay is everything an agent needs. It is independent of the HCL schema.
// The zero value of every optional field picks a safe default.
type Relay struct {
	// TransparentListen is where the nftables TPROXY rule delivers steered
	// client connections. Zero: this agent serves no client side.
	TransparentListen netip.AddrPort
	// DataListen is the agent's data_port, where client-side agents open
	// streams. Zero: this agent serves no server side.
	DataListen netip.AddrPort
	// HealthListen serves GET /healthz for the controller. Zero: none.
	HealthListen netip.AddrPort
	// HealthAllow lists the sources the health endpoint accepts (the
	// controller nodes'); a connection from elsewhere is closed unread.
	// Empty: any source.
	HealthAllow []netip.Prefix
	// HealthAllowUsers are the local users (names or uids) whose
	// connections from this node HealthAllow admits besides root's.
	HealthAllowUsers []string

	// FoundedFile, if set, is where a server-side agent records each
	// session it founds, so that after a restart it still refuses to
	// found them again (see dataplane/relay/founded.go). It is read and
	// opened at Start; a change takes effect at the next start. The
	// relay also uses the path with ".old" and ".new" appended, which no
	// other file may take. Empty: the record lives in the process only.
	FoundedFile string

	// Name is this agent's identity in every handshake: the initiator's
	// name in the hellos it sends, the responder name it requires in the
	// hellos it accepts.
	Name string

	// PSK authenticates every stream; at least 16 bytes. The pure layers
	// leave it empty and name the file in PSKFile; the shell reads it.
	PSK []byte
	// PSKFile is where PSK is read from; the relay does not read it.
	PSKFile string
	// Encryption is EncryptionAESGCM (also when empty) or EncryptionNone.
	Encryption string

	// AgentKey, with per-agent keys, is this agent's own static X25519
	// private key (stripe.AgentKeySize bytes), and PeerKeys the public
	// keys of the agents it talks to, by name: the streams of each pair
	// are authenticated by a key only the two derive (from these and the
	// PSK; stripe.HandshakeKey.Pair), so a PSK holder cannot pass for
	// another agent. Every peer a route names must have one. Both empty:
	// the PSK alone authenticates every stream. The pure layers leave
	// AgentKey empty and name the file in AgentKeyFile; the shell reads
	// it.
	AgentKey     []byte
	AgentKeyFile string
	PeerKeys     map[string][]byte
	// PublicKey, if set, is this agent's public key in the configuration:
	// AgentKey must be its private key.
	PublicKey []byte

	// Client lists the accelerated flows for which this agent is the
	// client side: a steered connection is accelerated by the first entry
	// whose Clients hold the client address and whose Server and Port are
	// its destination, striped to the agent Peer named PeerName.
	Client []Route
	// Server lists the flows for which this agent is the server side: the
	// data port accepts a session only for an entry that matches its
	// client and server, from the agent named PeerName, and with exactly
	// the entry's shape (streams, chunk size, queue length). Peer is not
	// consulted. Entries of Client never admit a session: an agent does
	// not serve as the far end of its own client-side routes.
	Server []Route

	Limits Limits

	// SocketBuffer sizes the stream sockets: >0 sets SO_SNDBUF and
	// SO_RCVBUF to that many bytes; 0 or <0 leaves both to the kernel's
	// autotuning (up to net.ipv4.tcp_wmem and tcp_rmem), so a stream's
	// congestion window, not a fixed buffer, bounds what it has in flight;
	// TCP_NOTSENT_LOWAT keeps the unsent part small either way. A fixed
	// SO_RCVBUF stops the kernel from growing the
	// buffer when small segments overrun the window it advertised; it then
	// drops data and the stream waits out a retransmission backoff of
	// seconds after a long pause of a slow end host.
	SocketBuffer int
	// Congestion is the TCP congestion control of stream sockets
	// (TCP_CONGESTION), e.g. "bbr", "htcp". Empty: the system default.
	Congestion string
	// RelayCPUs pins the agent's process to these CPUs. Go goroutines
	// migrate between threads, so the whole process is pinned: every
	// thread now, and every later one by inheritance. Empty: no pinning.
	// It is the only way relay pinning travels.
	RelayCPUs []int
}

// Route is one accelerated flow: TCP from a host in Clients to a host in
// Servers (or Server) on a port in Ports (or Port).
type Route struct {
	Name    string
	Clients []netip.Prefix
	// Servers and Ports, when not empty, name the server hosts or
	// networks and the listening ports; Server and Port are the form for
	// one server and one port.
	Servers []netip.Prefix
	Ports   []portrange.Range
	Server  netip.Addr
	Port    uint16
	// Streams, ChunkSize and QueueLength shape the session: N streams,
	// chunk bytes per frame and, when QueueLength is not 0, a bound of
	// queue length x streams frames on the receive window, which
	// otherwise follows the path (byte credit, see package stripe) within
	// the memory caps.
	Streams     int
	ChunkSize   int
	QueueLength int
	// AutoStreams (streams = "auto") makes Streams the most streams a
	// session may use: the client side starts with a few and opens more
	// while they raise the session's rate. The shape on the wire is
	// still Streams, so both sides agree without knowing.
	AutoStreams bool
	// Peer is the data address (address:data_port) of the server-side
	// agent; client side only.
	Peer netip.AddrPort
	// PeerName is the agent at the other end: the server-side agent
	// (responder) of a client entry, the client-side agent (initiator)
	// allowed to open sessions of a server entry.
	PeerName string
	// Peers, when not empty, are every server-side agent of a client
	// entry, in the configuration's order: a connection goes to the one
	// that package spread deals its bucket to (Spread mode, SpreadBits),
	// the agent the server site's switch steers the server's replies to.
	// Peer and PeerName are then its first.
	Peers      []Peer
	Spread     string
	SpreadBits int
	// PeerNames, when not empty, are every client-side agent a server
	// entry admits sessions from (PeerName is the first).
	PeerNames []string
	// Pool is the warm pool of authenticated idle streams a client-side
	// agent keeps toward Peer; client side only. Entries toward the same
	// peer share one pool, sized by the largest of their settings.
	Pool Pool
}

// Peer is a far agent: its name and data address.
type Peer struct {
	Name string
	Addr netip.AddrPort
	// Pool sizes the warm pool toward this agent (its own pool block);
	// zero: no pool.
	Pool Pool
}

// Admits reports whether a server entry accepts sessions opened by the
// agent named initiator.
func (w Route) Admits(initiator string) bool {
	if len(w.PeerNames) > 0 {
		return slices.Contains(w.PeerNames, initiator)
	}
	return initiator == w.PeerName
}

// Pool sizes a client-side agent's pool of pooled streams toward one
// peer agent (see package stripe, "Pooled streams").
type Pool struct {
	// MinIdle is how many idle streams the agent keeps open; it refills
	// in the background. Zero: no pool.
	MinIdle int
	// Max bounds the pool's streams, idle and being opened. Zero: MinIdle.
	Max int
	// IdleTimeout closes idle streams beyond MinIdle after this long.
	// Zero: DefaultPoolIdleTimeout.
	IdleTimeout time.Duration
}

// DefaultPoolIdleTimeout is Pool.IdleTimeout's default.
const DefaultPoolIdleTimeout = 5 * time.Minute

// MaxPoolSize bounds Pool.Max: fewer than a responder's default bound on
// a peer's idle pooled streams.
const MaxPoolSize = 1024

// WithDefaults fills Max and IdleTimeout.
func (p Pool) WithDefaults() Pool {
	if p.Max < p.MinIdle {
		p.Max = p.MinIdle
	}
	if p.IdleTimeout <= 0 {
		p.IdleTimeout = DefaultPoolIdleTimeout
	}
	return p
}

// Matches reports whether a connection from client to server belongs to
// the route.
func (w Route) Matches(client netip.Addr, server netip.AddrPort) bool {
	client, srv := client.Unmap(), server.Addr().Unmap()
	if len(w.Servers) == 0 && w.Server.Unmap() != srv {
		return false
	}
	if len(w.Servers) > 0 && !slices.ContainsFunc(w.Servers, func(p netip.Prefix) bool { return p.Contains(srv) }) {
		return false
	}
	if len(w.Ports) == 0 && w.Port != server.Port() || len(w.Ports) > 0 && !portrange.ContainsPort(w.Ports, server.Port()) {
		return false
	}
	return slices.ContainsFunc(w.Clients, func(p netip.Prefix) bool { return p.Contains(client) })
}

// Limits protect an agent. Zero values pick the defaults below, which are
// also the defaults of the configuration's limits block.
type Limits struct {
	// MaxSessions bounds live sessions (both sides together).
	MaxSessions int
	// MaxSessionsPerPeer bounds the server-side sessions of one
	// client-side agent (the initiator its handshakes name), so that one
	// busy site cannot take every session of a server-side agent that
	// serves several. Default: MaxSessions (no bound of its own).
	MaxSessionsPerPeer int
	// MaxStreams bounds the streams of one session.
	MaxStreams int
	// SessionMemory bounds the frame buffers of one session in bytes: a
	// session whose need at its initial window exceeds it is refused, and
	// its receive window grows no further than it allows.
	SessionMemory int64
	// Memory bounds the frame buffers and bookkeeping of all sessions of
	// the agent together, in bytes: every session reserves its worst case
	// before it allocates anything, and a session that does not fit is
	// refused. Zero: a quarter of the machine's RAM, decided by the agent
	// (WithDefaults leaves it zero).
	Memory int64
	// MaxPreAuth bounds data-port connections that have not finished
	// their handshake. At the cap a new connection evicts (resets) the
	// oldest unauthenticated one, so idle connections cannot lock out a
	// peer whose handshakes take one round trip.
	MaxPreAuth int
	// MaxPreAuthPerSource bounds unauthenticated connections from one
	// address; at the cap a new one evicts that address's oldest. An
	// IPv6 /64 (one host may use all its addresses) holds at most half
	// of MaxPreAuth (and never less than this), evicting its own oldest
	// beyond.
	// Client-side agents keep fewer handshakes than this in flight per
	// peer, so a peer's own stripes never evict each other.
	MaxPreAuthPerSource int
	// MaxHalfOpenPerSource bounds server-side sessions from one source
	// address that are still gathering their streams (fresh streams came,
	// but not the stream 0 a session starts on); more are refused with a
	// session limit.
	MaxHalfOpenPerSource int
	// PreAuthTimeout bounds a stream's handshake, and the time a session
	// gathering streams waits for its stream 0.
	PreAuthTimeout time.Duration
	// StallTimeout: when a session's delivery waits this long for a
	// missing frame while later frames are held (one stream is stuck
	// while others move), the streams that may hold it are lost, and
	// replaced. A stream whose TCP's timer (a retransmission timeout,
	// two window probes in a row) goes unanswered this long while it
	// holds data for the peer is lost too (a path that went silent). It is also the
	// idle time after which streams send TCP keepalive probes, so a dead
	// peer agent is noticed on an idle session. A slow end host is not a
	// stall: its backpressure may hold the streams for as long as it
	// likes.
	StallTimeout time.Duration
	// HalfClosedIdle aborts a session with one direction finished and no
	// byte moving in the other for this long.
	HalfClosedIdle time.Duration
	// ReconnectTimeout aborts a session that has had no stream for this
	// long: every stream was lost and none could be re-established.
	// While one stream lives the session goes on, its lost streams'
	// frames resent on it and replacements retried with backoff.
	ReconnectTimeout time.Duration
	// MaxPooledPerPeer bounds the idle pooled streams a server-side agent
	// holds for one client-side agent; more are refused
	// (StatusPoolRefused), so a peer holding pooled streams cannot grow
	// this agent's memory without bound. NoPooledStreams refuses every
	// pooled stream; zero is the default.
	MaxPooledPerPeer int
}

// NoPooledStreams is MaxPooledPerPeer of an agent that accepts no pooled
// streams (limits.pooled_per_peer = 0).
const NoPooledStreams = -1

// Defaults of Limits: the one set, used by the configuration where the
// file is silent and by the relay for a zero field.
const (
	DefaultMaxSessions          = 256
	DefaultMaxStreams           = 8192
	DefaultSessionMemory        = 1 << 30
	DefaultMaxPreAuth           = 1024
	DefaultMaxPreAuthPerSource  = 128
	DefaultMaxHalfOpenPerSource = 64
	DefaultPreAuthTimeout       = 5 * time.Second
	DefaultStallTimeout         = 30 * time.Second
	DefaultHalfClosedIdle       = 5 * time.Minute
	DefaultReconnectTimeout     = 30 * time.Second
	DefaultMaxPooledPerPeer     = 1024
)

// WithDefaults fills every zero limit with its default, except Memory,
// whose default depends on the machine the agent runs on.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxSessions, DefaultMaxSessions)
	def(&l.MaxSessionsPerPeer, l.MaxSessions)
	def(&l.MaxStreams, DefaultMaxStreams)
	def(&l.MaxPreAuth, DefaultMaxPreAuth)
	def(&l.MaxPreAuthPerSource, DefaultMaxPreAuthPerSource)
	def(&l.MaxHalfOpenPerSource, DefaultMaxHalfOpenPerSource)
	if l.MaxPooledPerPeer == 0 || l.MaxPooledPerPeer < NoPooledStreams {
		l.MaxPooledPerPeer = DefaultMaxPooledPerPeer
	}
	if l.SessionMemory <= 0 {
		l.SessionMemory = DefaultSessionMemory
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	dur(&l.PreAuthTimeout, DefaultPreAuthTimeout)
	dur(&l.StallTimeout, DefaultStallTimeout)
	dur(&l.HalfClosedIdle, DefaultHalfClosedIdle)
	dur(&l.ReconnectTimeout, DefaultReconnectTimeout)
	return l
}

// Mode returns the stripe mode of the encryption setting.
func (c *Relay) Mode() (stripe.Mode, error) {
	switch c.Encryption {
	case "", EncryptionAESGCM:
		return stripe.ModeAESGCM, nil
	case EncryptionNone:
		return stripe.ModeNone, nil
	}
	return 0, fmt.Errorf("encryption %q: want %q or %q", c.Encryption, EncryptionAESGCM, EncryptionNone)
}

// peerNamesOf is the names of a route's spread peers.
func peerNamesOf(peers []Peer) []string {
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.Name
	}
	return names
}

// MaxRelayCPUs bounds the CPUs a relay pins itself to: 0 to 1023, the
// CPU set the affinity call takes.
const MaxRelayCPUs = 1024

// Validate reports every problem of the relay spec at once. It needs the
// PSK: the shell validates after joining it.
func (c *Relay) Validate() error {
	var errs []error
	if !c.TransparentListen.IsValid() && !c.DataListen.IsValid() {
		errs = append(errs, errors.New("neither a transparent nor a data listen address"))
	}
	if !validAgentName(c.Name) {
		errs = append(errs, fmt.Errorf("agent name %q: want 1..%d printable bytes", c.Name, stripe.MaxNameSize))
	}
	if len(c.PSK) < stripe.MinPSKSize {
		errs = append(errs, fmt.Errorf("pre-shared key is %d bytes, need at least %d", len(c.PSK), stripe.MinPSKSize))
	}
	if _, err := c.Mode(); err != nil {
		errs = append(errs, err)
	}
	perAgent := len(c.AgentKey) > 0 || len(c.PeerKeys) > 0 || len(c.PublicKey) > 0
	if perAgent && len(c.AgentKey) != stripe.AgentKeySize {
		errs = append(errs, fmt.Errorf("agent key is %d bytes, want %d (per-agent keys: peer keys are given)", len(c.AgentKey), stripe.AgentKeySize))
	} else if len(c.PublicKey) > 0 {
		if own, err := stripe.NewAgentKey(c.AgentKey); err != nil {
			errs = append(errs, err)
		} else if pub := own.Public(); bytes.Equal(c.AgentKey, c.PublicKey) {
			errs = append(errs, fmt.Errorf("%s holds agent %s's public key, not its private key: point key_file at the file `sosappliance keygen` wrote",
				cmp.Or(c.AgentKeyFile, "the agent key"), c.Name))
		} else if !bytes.Equal(pub[:], c.PublicKey) {
			errs = append(errs, fmt.Errorf("the private key of %s is not agent %s's: its public key is %s, the configuration's public_key %s "+
				"(another agent's key file, or a key made since without updating public_key)",
				cmp.Or(c.AgentKeyFile, "the agent key"), c.Name, base64.StdEncoding.EncodeToString(pub[:]), base64.StdEncoding.EncodeToString(c.PublicKey)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.PeerKeys)) {
		if len(c.PeerKeys[name]) != stripe.AgentKeySize {
			errs = append(errs, fmt.Errorf("public key of agent %s is %d bytes, want %d", name, len(c.PeerKeys[name]), stripe.AgentKeySize))
		}
	}
	keyless := func(name string) bool { _, ok := c.PeerKeys[name]; return perAgent && name != "" && !ok }
	for _, p := range c.HealthAllow {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("health allow list: %v is not a prefix", p))
		}
	}
	lim := c.Limits.WithDefaults()
	entries := slices.Concat(c.Client, c.Server)
	for i, w := range entries {
		clientSide := i < len(c.Client)
		name := w.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("whitelist %s: "+format, append([]any{name}, args...)...))
		}
		if !validAgentName(w.PeerName) {
			bad("peer agent name %q: want 1..%d printable bytes", w.PeerName, stripe.MaxNameSize)
		}
		for _, n := range slices.Concat([]string{w.PeerName}, w.PeerNames, peerNamesOf(w.Peers)) {
			if keyless(n) {
				bad("peer agent %s has no public key (per-agent keys: every peer needs one)", n)
			}
		}
		if clientSide && !w.Peer.IsValid() {
			bad("client-side entry without a peer address")
		}
		for _, p := range w.Peers {
			if !validAgentName(p.Name) || !p.Addr.IsValid() {
				bad("spread peer %q at %s: want a valid agent name and data address", p.Name, p.Addr)
			}
		}
		if len(w.Peers) > 0 && (w.Spread != "port" && w.Spread != "address" || w.SpreadBits < 0 || w.SpreadBits > 8) {
			bad("spread %q over %d bits: want mode port or address and 0..8 bits", w.Spread, w.SpreadBits)
		}
		for _, n := range w.PeerNames {
			if !validAgentName(n) {
				bad("peer agent name %q: want 1..%d printable bytes", n, stripe.MaxNameSize)
			}
		}
		if len(w.Clients) == 0 {
			bad("no client prefixes")
		}
		servers := w.Servers
		if len(servers) == 0 && w.Server.IsValid() {
			servers = []netip.Prefix{netip.PrefixFrom(w.Server, w.Server.BitLen())}
		}
		for _, p := range w.Clients {
			if !p.IsValid() {
				bad("invalid client prefix")
				continue
			}
			for _, s := range servers {
				if s.IsValid() && p.Addr().Is4() != s.Addr().Is4() {
					bad("client prefix %s and server %s differ in address family", p, s)
				}
			}
		}
		if len(servers) == 0 {
			bad("no server address")
		}
		for _, s := range servers {
			if !s.IsValid() {
				bad("invalid server prefix")
			}
		}
		if w.Port == 0 && len(w.Ports) == 0 {
			bad("no server port")
		}
		for _, r := range w.Ports {
			if !r.Valid() {
				bad("empty port range %d-%d", r.Lo, r.Hi)
			}
		}
		switch {
		case w.Streams < 1 || w.Streams > 65535:
			bad("streams %d not in 1..65535", w.Streams)
		case w.Streams > lim.MaxStreams:
			bad("streams %d above the limit of %d", w.Streams, lim.MaxStreams)
		}
		if w.ChunkSize < 1 || w.ChunkSize > stripe.MaxChunkSize {
			bad("chunk size %d not in 1..%d", w.ChunkSize, stripe.MaxChunkSize)
		}
		if w.QueueLength < 0 {
			bad("queue length %d below 0", w.QueueLength)
		}
		if w.Streams >= 1 && w.ChunkSize >= 1 && w.ChunkSize <= stripe.MaxChunkSize {
			if need := stripe.SessionMemory(w.Streams, w.ChunkSize, stripe.InitialFrames(w.Streams, w.ChunkSize)); need > lim.SessionMemory {
				bad("a session needs %d bytes of buffers at its initial window, above the session memory cap of %d", need, lim.SessionMemory)
			}
		}
		if w.Peer.IsValid() && w.Peer.Port() == 0 {
			bad("peer %s has no port", w.Peer)
		}
		switch pool := w.Pool; {
		case pool.MinIdle < 0 || pool.Max < 0 || pool.IdleTimeout < 0:
			bad("pool min_idle %d, max %d, idle_timeout %s: none may be negative", pool.MinIdle, pool.Max, pool.IdleTimeout)
		case pool.Max != 0 && pool.Max < pool.MinIdle:
			bad("pool max %d below min_idle %d", pool.Max, pool.MinIdle)
		case max(pool.MinIdle, pool.Max) > MaxPoolSize:
			bad("pool of %d streams above the bound of %d", max(pool.MinIdle, pool.Max), MaxPoolSize)
		case !clientSide && pool != Pool{}:
			bad("a pool on a server-side entry (pools are kept by the client side)")
		}
	}
	for _, cpu := range c.RelayCPUs {
		if cpu < 0 || cpu >= MaxRelayCPUs {
			errs = append(errs, fmt.Errorf("relay CPU %d out of range", cpu))
		}
	}
	return errors.Join(errs...)
}

func validAgentName(s string) bool {
	if s == "" || len(s) > stripe.MaxNameSize {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return false
		}
	}
	return true
}
