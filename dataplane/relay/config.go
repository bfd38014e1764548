package relay

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

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

	// PSK authenticates every stream; at least 16 bytes.
	PSK []byte
	// Encryption is EncryptionAESGCM (also when empty) or EncryptionNone.
	Encryption string

	// Whitelist lists the accelerated flows that involve this agent. A
	// steered connection is accelerated by the first entry whose Clients
	// hold the client address and whose Server and Port are its
	// destination; Peer names the server-side agent to stripe to. The
	// server side accepts a session only if some entry matches it too
	// (Peer is not consulted there).
	Whitelist []Whitelist

	Limits Limits

	// SocketBuffer sizes the stream sockets: >0 sets SO_SNDBUF and
	// SO_RCVBUF to that many bytes; 0 sizes SO_SNDBUF from the session's
	// whitelist entry (chunk size x queue length, at least 256 KiB: each
	// stream queues about queue length chunks) and leaves the receive side
	// to the kernel's autotuning (up to net.ipv4.tcp_rmem); <0 leaves both
	// to the kernel. A fixed SO_RCVBUF stops the kernel from growing the
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
	// chunk bytes per frame, queue length x streams frames of reorder
	// window per direction.
	Streams     int
	ChunkSize   int
	QueueLength int
	// Peer is the data address (address:data_port) of the server-side
	// agent.
	Peer netip.AddrPort
}

// Limits protect an agent. Zero values pick the defaults below.
type Limits struct {
	// MaxSessions bounds live sessions (both sides together). Default 1024.
	MaxSessions int
	// MaxStreams bounds the streams of one session. Default 1024.
	MaxStreams int
	// SessionMemory bounds the frame buffers of one session in bytes; a
	// session whose SessionMemory() need exceeds it is refused. Default
	// 512 MiB.
	SessionMemory int64
	// MaxPreAuth bounds data-port connections that have not finished
	// their handshake; more are reset on accept. Default 256.
	MaxPreAuth int
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

// readBufferSize is the per-stream read buffer; it lets one read syscall
// pick up several small frames.
const readBufferSize = 32 << 10

// SessionMemory is the most frame-buffer memory one session can hold at
// an agent, in bytes, for a whitelist's streams, chunk size and queue
// length. Config validation can use it to check a cap; the agent refuses a
// session whose need exceeds Limits.SessionMemory. Per session and agent:
// the receive direction holds at most the window (queue length x streams)
// plus one frame per stream beyond it and one being read per stream; the
// send direction holds at most two frames per stream plus the one being
// filled; and every stream has a read buffer.
func SessionMemory(streams, chunkSize, queueLength int) int64 {
	frame := int64(stripe.FrameBufferSize(chunkSize))
	n, window := int64(streams), int64(queueLength)*int64(streams)
	return frame*(recvBudget(n, window)+sendBudget(n)) + n*readBufferSize
}

func recvBudget(streams, window int64) int64 { return window + 2*streams }
func sendBudget(streams int64) int64         { return 2*streams + 1 }

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
	if len(c.PSK) < stripe.MinPSKSize {
		errs = append(errs, fmt.Errorf("pre-shared key is %d bytes, need at least %d", len(c.PSK), stripe.MinPSKSize))
	}
	if _, err := c.mode(); err != nil {
		errs = append(errs, err)
	}
	lim := c.Limits.withDefaults()
	for i, w := range c.Whitelist {
		name := w.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("whitelist %s: "+format, append([]any{name}, args...)...))
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
		if w.QueueLength < 1 {
			bad("queue length %d below 1", w.QueueLength)
		}
		if w.Streams >= 1 && w.ChunkSize >= 1 && w.QueueLength >= 1 {
			if need := SessionMemory(w.Streams, w.ChunkSize, w.QueueLength); need > lim.SessionMemory {
				bad("a session needs %d bytes of buffers, above the session memory cap of %d", need, lim.SessionMemory)
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
