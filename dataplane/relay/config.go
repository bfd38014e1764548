package relay

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// Encryption values of Config.Encryption.
const (
	EncryptionAESGCM = "aes-256-gcm"
	EncryptionNone   = "none"
)

// Config is everything an agent needs. It is independent of the HCL schema;
// the daemon translates. The zero value of every optional field picks a safe
// default.
type Config struct {
	// TransparentListen is where the nftables TPROXY rule delivers steered
	// client connections. Zero: this agent serves no client side.
	TransparentListen netip.AddrPort
	// DataListen is the agent's data_port, where client-side agents open
	// streams. Zero: this agent serves no server side.
	DataListen netip.AddrPort
	// HealthListen serves GET /healthz for the controller. Zero: none.
	HealthListen netip.AddrPort

	// Name is this agent's identity in every handshake: the initiator's
	// name in the hellos it sends, the responder name it requires in the
	// hellos it accepts.
	Name string

	// PSK authenticates every stream; at least 16 bytes.
	PSK []byte
	// Encryption is EncryptionAESGCM (also when empty) or EncryptionNone.
	Encryption string

	// Client lists the accelerated flows for which this agent is the
	// client side: a steered connection is accelerated by the first entry
	// whose Clients hold the client address and whose Server and Port are
	// its destination, striped to the agent Peer named PeerName.
	Client []Whitelist
	// Server lists the flows for which this agent is the server side: the
	// data port accepts a session only for an entry that matches its
	// client and server, from the agent named PeerName, and with exactly
	// the entry's shape (streams, chunk size, queue length). Peer is not
	// consulted. Entries of Client never admit a session: an agent does
	// not serve as the far end of its own client-side routes.
	Server []Whitelist

	Limits Limits

	// SocketBuffer sizes the stream sockets: >0 sets SO_SNDBUF and
	// SO_RCVBUF to that many bytes; 0 or <0 leaves both to the kernel's
	// autotuning (up to net.ipv4.tcp_wmem and tcp_rmem), so a stream's
	// congestion window, not a fixed buffer, bounds what it has in flight;
	// TCP_NOTSENT_LOWAT keeps the unsent part small either way. A fixed SO_RCVBUF stops the kernel from growing the
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
	RelayCPUs []int
}

// Whitelist is one accelerated flow.
type Whitelist struct {
	Name    string
	Clients []netip.Prefix
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
	// Peer is the data address (address:data_port) of the server-side
	// agent; client side only.
	Peer netip.AddrPort
	// PeerName is the agent at the other end: the server-side agent
	// (responder) of a client entry, the client-side agent (initiator)
	// allowed to open sessions of a server entry.
	PeerName string
}

// Limits protect an agent. Zero values pick the defaults below.
type Limits struct {
	// MaxSessions bounds live sessions (both sides together). Default 1024.
	MaxSessions int
	// MaxStreams bounds the streams of one session. Default 1024.
	MaxStreams int
	// SessionMemory bounds the frame buffers of one session in bytes: a
	// session whose need at its initial window exceeds it is refused, and
	// its receive window grows no further than it allows. Default 512 MiB.
	SessionMemory int64
	// Memory bounds the frame buffers and bookkeeping of all sessions of
	// the agent together, in bytes: every session reserves its worst case
	// (SessionFootprint) before it allocates anything, and a session that
	// does not fit is refused. Default a quarter of the machine's RAM.
	Memory int64
	// MaxPreAuth bounds data-port connections that have not finished
	// their handshake. At the cap a new connection evicts (resets) the
	// oldest unauthenticated one, so idle connections cannot lock out a
	// peer whose handshakes take one round trip. Default 256.
	MaxPreAuth int
	// MaxPreAuthPerSource bounds unauthenticated connections from one
	// source address; at the cap a new one evicts that source's oldest.
	// Client-side agents keep fewer handshakes than this in flight per
	// peer (HandshakesInFlight), so a peer's own stripes never evict each
	// other. Default 128.
	MaxPreAuthPerSource int
	// MaxHalfOpenPerSource bounds server-side sessions from one source
	// address that are still gathering their streams; more are refused
	// with a session limit. Default 64.
	MaxHalfOpenPerSource int
	// PreAuthTimeout bounds a stream's handshake, and the time a session
	// waits for all its streams to join. Default 10 s.
	PreAuthTimeout time.Duration
	// StallTimeout aborts a session whose delivery waits this long for a
	// missing frame while later frames are held: one stream is stuck
	// while others move. It is also the idle time after which streams
	// send TCP keepalive probes, so a dead peer agent is noticed on an
	// idle session. A slow end host is not a stall: its backpressure may
	// hold the streams for as long as it likes. Default 30 s.
	StallTimeout time.Duration
	// HalfClosedIdle aborts a session with one direction finished and no
	// byte moving in the other for this long. Default 5 min.
	HalfClosedIdle time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxSessions    = 1024
	DefaultMaxStreams     = 1024
	DefaultSessionMemory  = 512 << 20
	DefaultMaxPreAuth     = 256
	DefaultPreAuthPerSrc  = 128
	DefaultHalfOpenPerSrc = 64
	DefaultPreAuthTimeout = 10 * time.Second
	DefaultStallTimeout   = 30 * time.Second
	DefaultHalfClosedIdle = 5 * time.Minute
)

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxSessions, DefaultMaxSessions)
	def(&l.MaxStreams, DefaultMaxStreams)
	def(&l.MaxPreAuth, DefaultMaxPreAuth)
	def(&l.MaxPreAuthPerSource, DefaultPreAuthPerSrc)
	def(&l.MaxHalfOpenPerSource, DefaultHalfOpenPerSrc)
	if l.Memory <= 0 {
		l.Memory = defaultMemory()
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
	return l
}

// HandshakesInFlight is how many stream handshakes a client-side agent
// runs at once toward one peer agent, across all its sessions: fewer than
// the peer's per-source pre-auth cap, so a session of thousands of stripes
// opens them in waves the peer admits instead of getting its own stripes
// evicted.
const HandshakesInFlight = 64

// SessionFootprint is what one session reserves from Limits.Memory with
// a receive window of window frames: its frame buffers
// (stripe.SessionMemory) plus the bookkeeping the agent allocates for it:
// reorder slots (a generous 48 bytes each), buffer queue slots (16) and
// per-stream state, mostly the stacks of its reader and writer goroutines
// (16 KiB). A session reserves it at its initial window and reserves the
// difference before its window grows. It saturates instead of
// overflowing.
func SessionFootprint(streams, chunkSize, windowFrames int) int64 {
	const perSlot, perBuffer, perStream = 48, 16, 16 << 10
	n := int64(max(streams, 0))
	window := int64(max(windowFrames, 0))
	book := satAdd(satMul(window, perSlot),
		satAdd(satMul(satAdd(stripe.RecvBudget(n, window), stripe.SendBudget(n)), perBuffer), satMul(n, perStream)))
	return satAdd(stripe.SessionMemory(streams, chunkSize, windowFrames), book)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// defaultMemory is a quarter of the machine's RAM, or 1 GiB if it cannot
// be read.
func defaultMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 1 << 30
	}
	return int64(min(uint64(si.Totalram)*uint64(si.Unit)/4, math.MaxInt64))
}

// mode returns the stripe mode of the encryption setting.
func (c *Config) mode() (stripe.Mode, error) {
	switch c.Encryption {
	case "", EncryptionAESGCM:
		return stripe.ModeAESGCM, nil
	case EncryptionNone:
		return stripe.ModeNone, nil
	}
	return 0, fmt.Errorf("encryption %q: want %q or %q", c.Encryption, EncryptionAESGCM, EncryptionNone)
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
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
	if _, err := c.mode(); err != nil {
		errs = append(errs, err)
	}
	lim := c.Limits.withDefaults()
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
		if clientSide && !w.Peer.IsValid() {
			bad("client-side entry without a peer address")
		}
		if len(w.Clients) == 0 {
			bad("no client prefixes")
		}
		for _, p := range w.Clients {
			if !p.IsValid() {
				bad("invalid client prefix")
			} else if w.Server.IsValid() && p.Addr().Is4() != w.Server.Is4() {
				bad("client prefix %s and server %s differ in address family", p, w.Server)
			}
		}
		if !w.Server.IsValid() {
			bad("no server address")
		}
		if w.Port == 0 {
			bad("no server port")
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
	}
	for _, cpu := range c.RelayCPUs {
		if cpu < 0 || cpu >= 1024 {
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

// lookup finds the whitelist entry of a connection from client to server.
func lookup(list []Whitelist, client netip.Addr, server netip.AddrPort) (Whitelist, bool) {
	client, srv := client.Unmap(), server.Addr().Unmap()
	for _, w := range list {
		if w.Server != srv || w.Port != server.Port() {
			continue
		}
		if slices.ContainsFunc(w.Clients, func(p netip.Prefix) bool { return p.Contains(client) }) {
			return w, true
		}
	}
	return Whitelist{}, false
}
