package sdn

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// ErrClosed is returned by requests on a connection that has ended.
var ErrClosed = errors.New("openflow connection closed")

// ErrDeadLink is why a connection ends when the switch stayed silent for
// twice the keepalive interval.
var ErrDeadLink = errors.New("no message from switch within twice the keepalive interval")

// ConnOptions tune one OpenFlow connection.
type ConnOptions struct {
	// Keepalive is the echo interval; a switch silent for twice as long is
	// declared dead. Default 5 s.
	Keepalive time.Duration
	// HandshakeTimeout bounds hello and features. Default 10 s.
	HandshakeTimeout time.Duration
	// Dial opens the TCP connection for Dial; default net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Logger receives connection events; default discards.
	Logger *slog.Logger
	// OnMessage, when set, receives asynchronous messages from the switch
	// (PORT_STATUS, PACKET_IN, FLOW_REMOVED, ...), from the reader
	// goroutine.
	OnMessage func(ofp13.Message)
	// OnFlowMods, when set, counts flow mods as they are written.
	OnFlowMods func(n int)
}

func (o ConnOptions) withDefaults() ConnOptions {
	if o.Keepalive <= 0 {
		o.Keepalive = 5 * time.Second
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = d.DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// SwitchConn is an OpenFlow 1.3 connection to one switch after version
// negotiation and features exchange. It answers echo requests, sends its
// own keepalives, tracks transaction ids and matches replies and errors to
// the requests that caused them. Its methods are safe for concurrent use.
type SwitchConn struct {
	conn     net.Conn
	features ofp13.FeaturesReply
	opts     ConnOptions
	log      *slog.Logger

	wmu sync.Mutex // one writer at a time, whole messages
	// applying is held (a token in it) by Apply for a whole convergence
	// and by RemoveOwnedFlows, so that a delete-all never lands between
	// two of a convergence's batches. retired, once closed (retire), ends
	// an Apply under way (its waits too) and refuses later ones.
	applying    chan struct{}
	retired     chan struct{}
	retiredOnce sync.Once

	mu      sync.Mutex
	nextXID uint32
	pending map[uint32]*pending
	err     error // why the connection ended

	done     chan struct{}
	lastRecv atomic.Int64 // unix nanoseconds

	// echoes are the replies the reader queued for answerEchoes.
	echoes        chan *ofp13.EchoReply
	echoesDropped atomic.Uint64

	// What the switch sends wrong is logged at most once a second
	// (limitedWarn), with the count of the lines left out.
	lastWarn        atomic.Int64 // unix nanoseconds
	warnsSuppressed atomic.Uint64
}

// limitedWarn logs msg at most once a second for this connection; the
// lines left out meanwhile are counted in the next one (suppressed), so a
// switch that sends a storm of errors, malformed messages or role changes
// costs the log a line a second, not one per message.
func (c *SwitchConn) limitedWarn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := c.lastWarn.Load()
	if now-last < int64(time.Second) || !c.lastWarn.CompareAndSwap(last, now) {
		c.warnsSuppressed.Add(1)
		return
	}
	if n := c.warnsSuppressed.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	c.log.Warn(msg, args...)
}

// maxQueuedEchoes bounds the echo replies waiting for the writer. A switch
// sends one echo per keepalive interval; one that sends more than this
// while not reading our replies is flooding, and its extra echoes go
// unanswered.
const maxQueuedEchoes = 16

// pending is a request waiting for its reply, or a flow mod waiting to
// learn whether the switch refused it.
type pending struct {
	replies []ofp13.Message
	bytes   int // of replies, headers included, and their decoded cost (replyCost)
	limit   ReplyLimit
	// reply is the type of message that answers the request (0: any).
	reply ofp13.Type
	err   error
	// quiet entries (flow mods) never complete by themselves; a later
	// barrier reply proves they were processed.
	quiet bool
	done  chan struct{}
}

// Dial connects to a switch that listens for controllers (OVS: ptcp:),
// target being "tcp:IP:PORT" or "IP:PORT".
func Dial(ctx context.Context, target string, opts ConnOptions) (*SwitchConn, error) {
	opts = opts.withDefaults()
	addr, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	conn, err := opts.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial switch %s: %w", target, err)
	}
	sc, err := Handshake(ctx, conn, opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return sc, nil
}

// AcceptSwitch waits on ln for the switch sw and refuses (closes) any
// other connection meanwhile: one from a source outside sw.Allow before
// anything is sent, plain TCP when sw.TLS is set, a failed TLS handshake
// (serverTLS verifies the switch's certificate), a certificate that does
// not name sw.TLSName, another datapath id.
// Handshakes run side by side, at most maxAcceptHandshakes, the oldest
// given up for a newer one, so silent connections that came first cannot
// keep the switch waiting past ctx. No goroutine of it outlives the call:
// ln is shared with the next switch's wait. When ctx ends, ln is closed,
// and closed by the time the call returns.
func AcceptSwitch(ctx context.Context, ln net.Listener, sw flows.Switch, serverTLS *tls.Config, opts ConnOptions) (*SwitchConn, error) {
	opts = opts.withDefaults()
	if sw.TLS && serverTLS == nil {
		return nil, fmt.Errorf("switch %s requires TLS, and there is no TLS configuration", sw.Name)
	}
	defer closeWhenDone(ctx, ln)()
	// A listener with deadlines lets the accept loop look at finished
	// handshakes every acceptPoll; without, each handshake is awaited
	// before the next accept.
	dl, _ := ln.(interface{ SetDeadline(time.Time) error })
	if dl != nil {
		defer dl.SetDeadline(time.Time{})
	}
	type attempt struct {
		conn   net.Conn
		remote string
		cancel context.CancelFunc
	}
	type outcome struct {
		a   *attempt
		sc  *SwitchConn
		err error
	}
	results := make(chan outcome)
	finished := make(chan struct{})
	var wg sync.WaitGroup
	var inflight []*attempt
	defer func() {
		// Given-up handshakes were cancelled already.
		close(finished)
		for _, a := range inflight {
			a.cancel()
		}
		wg.Wait()
	}()
	start := func(conn net.Conn, remote string) {
		hctx, cancel := context.WithTimeout(ctx, opts.HandshakeTimeout)
		a := &attempt{conn: conn, remote: remote, cancel: cancel}
		inflight = append(inflight, a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			stopConn := context.AfterFunc(hctx, func() { conn.Close() })
			defer stopConn()
			conn, secured, err := secure(hctx, conn, serverTLS)
			var sc *SwitchConn
			if err == nil && sw.TLS && !secured {
				err = errors.New("plain TCP; the switch must connect over TLS")
			}
			if err == nil {
				if why := certMismatch(sw, conn); why != "" {
					err = errors.New(why)
				}
			}
			if err == nil {
				sc, err = Handshake(hctx, conn, opts)
			}
			if err == nil && !stopConn() {
				sc.Close() // timed out or given up as the handshake ended
				err = context.Cause(hctx)
			}
			if err != nil {
				conn.Close()
			}
			select {
			case results <- outcome{a, sc, err}:
			case <-finished:
				if sc != nil {
					sc.Close()
				}
			}
		}()
	}
	// decide takes a finished handshake out of inflight and says whether
	// it is the switch.
	decide := func(o outcome) bool {
		inflight = slices.DeleteFunc(inflight, func(a *attempt) bool { return a == o.a })
		switch {
		case o.err != nil:
			opts.Logger.Warn("switch handshake failed", "remote", o.a.remote, "err", o.err)
			return false
		case o.sc.DatapathID() == sw.DatapathID:
			return true
		}
		opts.Logger.Warn("refusing switch: not the one awaited", "remote", o.a.remote,
			"datapath_id", DatapathIDString(o.sc.DatapathID()), "want", DatapathIDString(sw.DatapathID))
		o.sc.Close()
		return false
	}
	for {
		for more := true; more; {
			select {
			case o := <-results:
				if decide(o) {
					return o.sc, nil
				}
			default:
				more = false
			}
		}
		if dl != nil {
			_ = dl.SetDeadline(time.Now().Add(acceptPoll))
		}
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return nil, fmt.Errorf("accept switch: %w", err)
		}
		remote := conn.RemoteAddr().String()
		if !allowedFrom(sw, addrOf(conn.RemoteAddr())) {
			opts.Logger.Warn("refusing switch: source not on its allow list", "remote", remote, "switch", sw.Name)
			conn.Close()
			continue
		}
		if len(inflight) >= maxAcceptHandshakes {
			oldest := inflight[0]
			inflight = inflight[1:]
			opts.Logger.Warn("giving up the oldest switch handshake for a newer connection", "remote", oldest.remote, "in_flight", maxAcceptHandshakes)
			oldest.cancel()
		}
		start(conn, remote)
		if dl == nil {
			select {
			case o := <-results:
				if decide(o) {
					return o.sc, nil
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
}

// closeWhenDone closes ln once ctx is done, from a goroutine of its own
// (context.AfterFunc). The stop it returns, to be deferred, returns only
// once a close under way has ended: a loaded machine may run that
// goroutine late, and a listen on the address after the caller returns
// (a one-shot plan's next switch, a controller started again) would find
// ln still bound ("bind: address already in use").
func closeWhenDone(ctx context.Context, ln net.Listener) (stop func()) {
	closed := make(chan struct{})
	stopClose := context.AfterFunc(ctx, func() { ln.Close(); close(closed) })
	return func() {
		if !stopClose() {
			<-closed
		}
	}
}

// maxAcceptHandshakes bounds the handshakes AcceptSwitch runs at once;
// acceptPoll is how often its accept loop looks at finished ones.
const (
	maxAcceptHandshakes = 16
	acceptPoll          = 25 * time.Millisecond
)

func parseTarget(target string) (string, error) {
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(target, "tcp:"))
	if err != nil || ap.Port() == 0 {
		return "", fmt.Errorf("switch target %q is not tcp:IP:PORT", target)
	}
	return ap.String(), nil
}

// DatapathIDString prints a datapath id the way configs and OVS write it.
func DatapathIDString(id uint64) string {
	b := make([]string, 8)
	for i := range b {
		b[i] = fmt.Sprintf("%02x", byte(id>>(56-8*i)))
	}
	return strings.Join(b, ":")
}

// Handshake negotiates OpenFlow 1.3 on an open connection and reads the
// switch's features. On success the connection is owned by the returned
// SwitchConn.
func Handshake(ctx context.Context, conn net.Conn, opts ConnOptions) (*SwitchConn, error) {
	opts = opts.withDefaults()
	deadline := time.Now().Add(opts.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	remote := conn.RemoteAddr().String()
	hello := ofp13.NewHello(ofp13.Version)
	hello.XID = 1
	if err := writeMessage(conn, hello); err != nil {
		return nil, fmt.Errorf("switch %s: send hello: %w", remote, err)
	}
	first, err := readHandshakeMessage(conn)
	if err != nil {
		return nil, fmt.Errorf("switch %s: read hello: %w", remote, err)
	}
	peer, ok := first.(*ofp13.Hello)
	if !ok {
		return nil, fmt.Errorf("switch %s: first message is %s, not a hello", remote, first.MessageType())
	}
	// Versions() reads the bitmap, or without one every version up to the
	// header's, so this covers both negotiation styles.
	if !peer.Supports(ofp13.Version) {
		// Tell the switch why before hanging up, as the spec asks.
		_ = writeMessage(conn, &ofp13.Error{XID: peer.XID, Type: ofp13.ErrorTypeHelloFailed,
			Code: ofp13.HelloFailedIncompatible, Data: []byte("sosappliance speaks OpenFlow 1.3 only")})
		return nil, fmt.Errorf("switch %s offers OpenFlow versions %v, not 1.3 (0x04)", remote, peer.Versions())
	}
	if err := writeMessage(conn, &ofp13.FeaturesRequest{XID: 2}); err != nil {
		return nil, fmt.Errorf("switch %s: send features request: %w", remote, err)
	}
	var features *ofp13.FeaturesReply
	for features == nil {
		m, err := readHandshakeMessage(conn)
		if err != nil {
			return nil, fmt.Errorf("switch %s: read features: %w", remote, err)
		}
		switch m := m.(type) {
		case *ofp13.FeaturesReply:
			features = m
		case *ofp13.EchoRequest:
			if err := writeMessage(conn, &ofp13.EchoReply{XID: m.XID, Data: m.Data}); err != nil {
				return nil, err
			}
		case *ofp13.Error:
			return nil, fmt.Errorf("switch %s refused the handshake: %w", remote, m)
		}
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	sc := &SwitchConn{
		conn: conn, features: *features, opts: opts,
		log:     opts.Logger.With("remote", remote, "datapath_id", DatapathIDString(features.DatapathID)),
		nextXID: 16, pending: map[uint32]*pending{}, done: make(chan struct{}),
		echoes:   make(chan *ofp13.EchoReply, maxQueuedEchoes),
		applying: make(chan struct{}, 1), retired: make(chan struct{}),
	}
	sc.lastRecv.Store(time.Now().UnixNano())
	// Only a switch that completed the handshake gets a full-size buffer.
	go sc.readLoop(bufio.NewReaderSize(conn, 64<<10))
	go sc.keepalive()
	go sc.answerEchoes()
	return sc, nil
}

// heardSince reports whether a message came from the switch after at:
// a switch that sends its own echoes, barrier replies or errors is alive,
// though the answer to an echo sent at at may wait behind the flow mods
// ahead of it (TCP keeps the order).
func (c *SwitchConn) heardSince(at time.Time) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	return c.lastRecv.Load() > at.UnixNano()
}

// DatapathID is the switch's datapath id from its features reply.
func (c *SwitchConn) DatapathID() uint64 { return c.features.DatapathID }

// Features is the switch's features reply.
func (c *SwitchConn) Features() ofp13.FeaturesReply { return c.features }

// RemoteAddr is the switch's address.
func (c *SwitchConn) RemoteAddr() string { return c.conn.RemoteAddr().String() }

// Done is closed when the connection has ended; Err then says why.
func (c *SwitchConn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended, nil while it is up.
func (c *SwitchConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection.
func (c *SwitchConn) Close() error {
	c.fail(ErrClosed)
	return nil
}

func (c *SwitchConn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	waiting := c.pending
	c.pending = map[uint32]*pending{}
	c.mu.Unlock()
	c.conn.Close()
	for _, p := range waiting {
		if !p.quiet {
			p.err = err
			close(p.done)
		}
	}
	close(c.done)
}

func (c *SwitchConn) keepalive() {
	t := time.NewTicker(c.opts.Keepalive)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if err := c.send(&ofp13.EchoRequest{Data: []byte("sosappliance")}); err != nil {
				c.fail(fmt.Errorf("send echo: %w", err))
				return
			}
		}
	}
}

func (c *SwitchConn) readLoop(br *bufio.Reader) {
	for {
		// Any message proves the link is alive; silence for twice the
		// keepalive interval, which spans at least one echo, proves it dead.
		if err := c.conn.SetReadDeadline(time.Now().Add(2 * c.opts.Keepalive)); err != nil {
			c.fail(err)
			return
		}
		m, h, err := readMessage(br)
		var de *ofp13.DecodeError
		switch {
		case errors.As(err, &de) && !errors.Is(err, errFraming):
			// The frame was whole, only its content is malformed: report
			// it, fail the request it answers, and carry on with the next
			// message.
			c.limitedWarn("malformed message from switch", "err", err)
			c.failAnswered(h, err)
			continue
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = ErrDeadLink
			}
			c.fail(err)
			return
		}
		c.lastRecv.Store(time.Now().UnixNano())
		c.dispatch(m, int(h.Length))
	}
}

// failAnswered fails the request that a message the controller could not
// decode answered (its transaction id, and its type if it was not an
// error): a part of a flow dump that is left out must not leave the dump
// looking whole, with the flows it held neither kept nor deleted, and an
// error that cannot be read is still the switch refusing. A flow mod has
// no reply: only an error answers it, and the first one stands (a
// malformed message of another type with its id is ignored, as a
// well-formed one is).
func (c *SwitchConn) failAnswered(h ofp13.Header, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[h.XID]
	switch {
	case p == nil:
		return
	case p.quiet:
		if h.Type == ofp13.TypeError && p.err == nil {
			p.err = fmt.Errorf("malformed %s from switch: %w", h.Type, err)
		}
		return
	case h.Type != ofp13.TypeError && p.reply != 0 && h.Type != p.reply:
		return
	}
	p.err = fmt.Errorf("malformed %s from switch: %w", h.Type, err)
	p.replies = nil
	delete(c.pending, h.XID)
	close(p.done)
}

// answerEchoes writes the echo replies the reader queued. It is the one
// goroutine that may wait on the writer for them, so a switch that floods
// echoes and never reads costs one goroutine and a bounded queue.
func (c *SwitchConn) answerEchoes() {
	for {
		select {
		case <-c.done:
			return
		case r := <-c.echoes:
			if err := c.send(r); err != nil {
				c.fail(fmt.Errorf("answer echo: %w", err))
				return
			}
		}
	}
}

func (c *SwitchConn) dispatch(m ofp13.Message, size int) {
	switch m := m.(type) {
	case *ofp13.EchoRequest:
		// The reader must never wait for the writer: a switch stops
		// reading once too many of its replies are unread, and a writer
		// blocked on that switch would then wait for this reader forever.
		select {
		case c.echoes <- &ofp13.EchoReply{XID: m.XID, Data: m.Data}:
		default:
			if c.echoesDropped.Add(1) == 1 {
				c.log.Warn("switch sends echo requests faster than it reads the replies; leaving the excess unanswered",
					"queued", maxQueuedEchoes)
			}
		}
		return
	case *ofp13.Error:
		if len(m.Data) > maxErrorData {
			// Kept until the barrier after the flow mod it answers: only
			// the start, which names the request, and not the buffer the
			// whole message came in (a switch could answer each of
			// thousands of flow mods with 64 KiB).
			m.Data = slices.Clone(m.Data[:maxErrorData])
		}
		c.mu.Lock()
		p := c.pending[m.XID]
		if p != nil {
			p.err = m
			if !p.quiet {
				delete(c.pending, m.XID)
				close(p.done)
			}
		}
		c.mu.Unlock()
		if p == nil {
			c.limitedWarn("switch error for no pending request", "xid", m.XID, "err", m)
		}
		return
	}
	xid := m.TransactionID()
	c.mu.Lock()
	p := c.pending[xid]
	if p != nil && !p.quiet && p.reply != 0 && m.MessageType() != p.reply {
		c.mu.Unlock()
		// Not an answer to that request (a multipart reply to a barrier,
		// say): dropped, so that it is not held with the request.
		c.limitedWarn("switch answered a request with the wrong type of message; ignored",
			"xid", xid, "type", m.MessageType().String(), "want", p.reply.String())
		return
	}
	if p != nil && !p.quiet {
		p.replies = append(p.replies, m)
		p.bytes += size + replyCost(m)
		var tooLarge error
		if len(p.replies) > p.limit.Parts || p.bytes > p.limit.Bytes {
			tooLarge = fmt.Errorf("%w: more than %d parts or %d bytes (%d parts, %d bytes so far)",
				ErrReplyTooLarge, p.limit.Parts, p.limit.Bytes, len(p.replies), p.bytes)
			p.replies, p.err = nil, tooLarge
		}
		if mp, ok := m.(ofp13.Multipart); tooLarge != nil || !ok || mp.MultipartFlags()&ofp13.MultipartMore == 0 {
			delete(c.pending, xid)
			close(p.done)
		}
		c.mu.Unlock()
		if tooLarge != nil {
			// The rest of the reply would follow; only hanging up stops it.
			c.fail(tooLarge)
		}
		return
	}
	c.mu.Unlock()
	if _, keepalive := m.(*ofp13.EchoReply); keepalive {
		return // answers our keepalive echoes; arriving was all it had to do
	}
	if c.opts.OnMessage != nil {
		c.opts.OnMessage(m)
	} else {
		c.log.Debug("message from switch", "type", m.MessageType().String())
	}
}

// maxErrorData is how much of a switch ERROR's data is kept: the
// specification asks for at least the first 64 bytes of the request.
const maxErrorData = 64

// replyType is the type of message that answers each request type.
var replyType = map[ofp13.Type]ofp13.Type{
	ofp13.TypeEchoRequest:      ofp13.TypeEchoReply,
	ofp13.TypeFeaturesRequest:  ofp13.TypeFeaturesReply,
	ofp13.TypeGetConfigRequest: ofp13.TypeGetConfigReply,
	ofp13.TypeMultipartRequest: ofp13.TypeMultipartReply,
	ofp13.TypeBarrierRequest:   ofp13.TypeBarrierReply,
	ofp13.TypeRoleRequest:      ofp13.TypeRoleReply,
	ofp13.TypeGetAsyncRequest:  ofp13.TypeGetAsyncReply,
}

// replyCost is what a reply takes in memory beyond its bytes on the wire,
// counted against its request's ReplyLimit: a flow entry's match fields
// and instructions decode to structs many times their size (an empty
// 4-byte match field to a 56-byte OXM), so a dump within the limit on the
// wire could take many times it in the heap. An entry itself decodes to
// a struct of about twice its minimal size on the wire, counted too.
func replyCost(m ofp13.Message) int {
	r, ok := m.(*ofp13.FlowStatsReply)
	if !ok {
		return 0
	}
	n := cap(r.Stats) * int(unsafe.Sizeof(ofp13.FlowStats{}))
	for i := range r.Stats {
		st := &r.Stats[i]
		n += cap(st.Match.Fields) * int(unsafe.Sizeof(ofp13.OXM{}))
		for _, f := range st.Match.Fields {
			n += bytesCost(f.Value) + bytesCost(f.Mask)
		}
		n += instructionsCost(st.Instructions)
	}
	return n
}

// What the decoder allocates, as replyCost counts it: a slice by its
// capacity (append grows it past its length), an interface value as its
// slot in the slice (interfaceSlot) and the struct it points at
// (structCost; smallStruct for the few-byte ones), and bytes copied out of
// the message by their capacity. An 8-byte action on the wire costs some
// 72 bytes decoded, so a flow dump padded with actions is counted by its
// actions, not its instructions.
const (
	interfaceSlot = 16
	smallStruct   = 16
)

func structCost(size uintptr) int { return int((size + 15) &^ 15) }

func bytesCost(b []byte) int { return (cap(b) + 7) &^ 7 }

func instructionsCost(ins []ofp13.Instruction) int {
	n := cap(ins) * interfaceSlot
	for _, in := range ins {
		var acts []ofp13.Action
		switch in := in.(type) {
		case *ofp13.ApplyActions:
			n += structCost(unsafe.Sizeof(*in))
			acts = in.Actions
		case *ofp13.WriteActions:
			n += structCost(unsafe.Sizeof(*in))
			acts = in.Actions
		case *ofp13.InstructionRaw:
			n += structCost(unsafe.Sizeof(*in)) + bytesCost(in.Body)
		default:
			n += smallStruct
		}
		n += cap(acts) * interfaceSlot
		for _, a := range acts {
			switch a := a.(type) {
			case *ofp13.ActionSetField:
				n += structCost(unsafe.Sizeof(*a)) + bytesCost(a.Field.Value) + bytesCost(a.Field.Mask)
			case *ofp13.ActionRaw:
				n += structCost(unsafe.Sizeof(*a)) + bytesCost(a.Body)
			default:
				n += smallStruct
			}
		}
	}
	return n
}

// register reserves an xid for msg and tracks it.
func (c *SwitchConn) register(msg ofp13.Message, quiet bool, limit ReplyLimit) (*pending, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, c.err)
	}
	xid := c.takeXIDLocked()
	msg.SetTransactionID(xid)
	p := &pending{quiet: quiet, limit: limit, reply: replyType[msg.MessageType()], done: make(chan struct{})}
	c.pending[xid] = p
	return p, nil
}

// takeXIDLocked is the next transaction id: never 0 nor below 16 after it
// wraps (those are the handshake's), and never one a request still waits
// on. c.mu is held.
func (c *SwitchConn) takeXIDLocked() uint32 {
	for {
		c.nextXID++
		if c.nextXID == 0 {
			c.nextXID = 16
		}
		if _, busy := c.pending[c.nextXID]; !busy {
			return c.nextXID
		}
	}
}

func (c *SwitchConn) forget(xid uint32) {
	c.mu.Lock()
	delete(c.pending, xid)
	c.mu.Unlock()
}

// ErrReplyTooLarge is why a connection ends when the switch sent more for
// one request than its ReplyLimit allows.
var ErrReplyTooLarge = errors.New("reply from switch exceeds its limit")

// ReplyLimit bounds the reply to one request, all parts of a multipart
// reply together, headers included. A switch that sends more is cut off:
// it may be endlessly setting MultipartMore.
type ReplyLimit struct {
	Parts int
	Bytes int
}

// DefaultReplyLimit bounds the replies to Request.
var DefaultReplyLimit = ReplyLimit{Parts: 1024, Bytes: 16 << 20}

// FlowReplyLimit bounds a flow dump expected to hold about expected flows.
// The margin covers owned flows a larger earlier configuration left
// behind, and entries bigger than the appliance's own. The bytes count
// what the entries take decoded too (replyCost, which counts what the
// decoder allocates, slices by their capacity): an appliance flow with a
// port range some 950 in all (816 measured in the heap), 136 of them on
// the wire; 3,584 an entry keeps the margin 512 bytes on the wire gave (a
// stale table of some 62,000 appliance flows still dumps, to be shrunk),
// and bounds what a switch can make the controller hold to about the
// limit itself: 56 MiB with no flow desired.
func FlowReplyLimit(expected int) ReplyLimit {
	n := 4*expected + 16384
	return ReplyLimit{Parts: n, Bytes: n * 3584}
}

// Request sends msg with a fresh xid and waits for its reply: one message,
// or every part of a multipart reply, within DefaultReplyLimit. A switch
// ERROR for the request is returned as an *ofp13.Error.
func (c *SwitchConn) Request(ctx context.Context, msg ofp13.Message) ([]ofp13.Message, error) {
	return c.RequestLimit(ctx, msg, DefaultReplyLimit)
}

// RequestLimit is Request with a limit of its own. A reply beyond the
// limit ends the connection with ErrReplyTooLarge.
func (c *SwitchConn) RequestLimit(ctx context.Context, msg ofp13.Message, limit ReplyLimit) ([]ofp13.Message, error) {
	p, err := c.register(msg, false, limit)
	if err != nil {
		return nil, err
	}
	if err := c.send(msg); err != nil {
		c.forget(msg.TransactionID())
		return nil, err
	}
	return c.await(ctx, p, msg.TransactionID())
}

// await waits for the reply of the request p registered under xid.
func (c *SwitchConn) await(ctx context.Context, p *pending, xid uint32) ([]ofp13.Message, error) {
	select {
	case <-p.done:
		if p.err != nil {
			return p.replies, p.err
		}
		return p.replies, nil
	case <-ctx.Done():
		c.forget(xid)
		return nil, ctx.Err()
	}
}

// Barrier waits until the switch has processed every earlier message.
func (c *SwitchConn) Barrier(ctx context.Context) error {
	_, err := c.Request(ctx, &ofp13.BarrierRequest{})
	return err
}

// Echo measures one echo round trip.
func (c *SwitchConn) Echo(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	_, err := c.Request(ctx, &ofp13.EchoRequest{Data: []byte("rtt")})
	return time.Since(start), err
}

func (c *SwitchConn) send(msg ofp13.Message) error {
	if msg.TransactionID() == 0 {
		c.mu.Lock()
		msg.SetTransactionID(c.takeXIDLocked())
		c.mu.Unlock()
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(func(b []byte) ([]byte, error) { return msg.AppendBinary(b) })
}

func (c *SwitchConn) writeLocked(fill func([]byte) ([]byte, error)) error {
	buf, err := fill(make([]byte, 0, 256))
	if err != nil {
		return err
	}
	if err := c.conn.SetWriteDeadline(time.Now().Add(c.writeTimeout())); err != nil {
		return err
	}
	if _, err := c.conn.Write(buf); err != nil {
		c.fail(fmt.Errorf("write: %w", err))
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return nil
}

// writeTimeout bounds a blocked write the same way silence bounds reads.
func (c *SwitchConn) writeTimeout() time.Duration {
	return max(2*c.opts.Keepalive+time.Second, 10*time.Second)
}

// OwnedFlows returns every flow on the switch whose cookie carries the
// appliance's prefix, in every table, within FlowReplyLimit(0).
func (c *SwitchConn) OwnedFlows(ctx context.Context) ([]flows.Flow, error) {
	return c.ownedFlows(ctx, FlowReplyLimit(0))
}

func (c *SwitchConn) ownedFlows(ctx context.Context, limit ReplyLimit) ([]flows.Flow, error) {
	replies, err := c.RequestLimit(ctx, ofp13.NewFlowStatsRequest(flows.CookiePrefix, flows.CookieMask), limit)
	if err != nil {
		return nil, fmt.Errorf("dump flows: %w", err)
	}
	var out []flows.Flow
	for _, r := range replies {
		fs, ok := r.(*ofp13.FlowStatsReply)
		if !ok {
			return nil, fmt.Errorf("dump flows: switch answered with %s", r.MessageType())
		}
		for _, s := range fs.Stats {
			out = append(out, flows.FromStats(s))
		}
	}
	return out, nil
}

// FlowError is a change the switch refused, with the offending flow.
type FlowError struct {
	Change flows.Change
	Err    *ofp13.Error
	// Unreadable is set instead of Err when the switch answered the change
	// with an error message that did not decode: a refusal all the same.
	Unreadable error
}

func (e *FlowError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("switch refused %s with an error message that does not decode: %v", e.Change, e.Unreadable)
	}
	return fmt.Sprintf("switch refused %s: %s/%s", e.Change, e.Err.Type, e.Err.CodeName())
}

func (e *FlowError) Unwrap() error {
	if e.Err == nil {
		return e.Unreadable
	}
	return e.Err
}

// RefusedError is the error of a convergence some of whose changes the
// switch refused: every one is in Failed (and errors.As finds each), the
// text names the first refusedShown and counts the rest, so that a switch
// refusing thousands of changes does not make a status or a command's
// output thousands of lines long.
type RefusedError struct {
	Failed []*FlowError
	// Of is how many changes the convergence sent.
	Of int
}

// refusedShown is how many refused changes RefusedError's text names.
const refusedShown = 5

func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "switch refused %d of %d flow changes:", len(e.Failed), e.Of)
	for i, fe := range e.Failed {
		if i == refusedShown {
			fmt.Fprintf(&b, "\n... and %d more", len(e.Failed)-i)
			break
		}
		b.WriteString("\n")
		b.WriteString(fe.Error())
	}
	return b.String()
}

func (e *RefusedError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, fe := range e.Failed {
		errs[i] = fe
	}
	return errs
}

// Result is what one convergence did.
type Result struct {
	// Changes are the differences found; Sent of them were sent as flow
	// mods, and Failed were refused by the switch.
	Changes flows.Changes
	Sent    int
	Failed  []*FlowError
}

// maxBatch is how many bytes of flow mods go into one write at most
// (Apply); firstBatchMods how many flow mods the first batch of a
// convergence holds at most, and minBatchMods and maxBatchMods the
// bounds of the later ones (nextBatchMods).
const (
	maxBatch       = 64 << 10
	firstBatchMods = 256
	minBatchMods   = 16
	maxBatchMods   = 1 << 16
)

// nextBatchMods sizes a convergence's next batch from its last: n flow
// mods (of at most limit) that the switch took work to answer, beyond the
// round trip of the quickest batch (the link's share, which an echo waits
// for anyway), against the target time per batch. Too slow, it shrinks
// to what the switch does in target; well within, a full batch doubles.
func nextBatchMods(limit, n int, work, target time.Duration) int {
	switch {
	case work > target && work > 0:
		return max(minBatchMods, int(int64(n)*int64(target)/int64(work)))
	case work < target/2 && n >= limit:
		return min(maxBatchMods, 2*limit)
	}
	return limit
}

// errRetired ends a convergence on a connection retire was called for.
var errRetired = errors.New("the controller is removing its flows and leaving the switch")

// retire ends a convergence under way at once, its waits too, and
// refuses later ones: the controller is about to remove its owned flows
// (RemoveOwnedFlows) and close the connection.
func (c *SwitchConn) retire() { c.retiredOnce.Do(func() { close(c.retired) }) }

// Apply sends the flow mods that carry out changes, then a barrier, and
// waits for it: when Apply returns, the switch has processed every change,
// and every change it refused is in Result.Failed with the switch's error.
// The error is non-nil when the connection failed or a change was refused:
// a *RefusedError alone when the switch processed every change, joined
// with what ended the convergence when it did not (the refusals that
// arrived before are kept then too).
func (c *SwitchConn) Apply(ctx context.Context, changes flows.Changes) (Result, error) {
	res := Result{Changes: changes}
	if changes.Empty() {
		return res, nil
	}
	mods := changes.FlowMods()
	list := changes.List()
	waits := make([]*pending, len(mods))
	defer func() {
		for _, m := range mods {
			c.forget(m.TransactionID())
		}
	}()
	for i, m := range mods {
		p, err := c.register(m, true, ReplyLimit{})
		if err != nil {
			return res, err
		}
		waits[i] = p
	}
	// Each batch is followed by a barrier, and the next goes once the
	// switch answered it, sized so that it works through a batch in about
	// a quarter of the keepalive: an echo (the keepalive's own, a claim's
	// check) then waits behind that much work at most, not behind the
	// whole convergence, which can take a switch far longer than the
	// keepalive (Open vSwitch took seconds for 50,000 deletes, and a
	// switch whose echo is answered that late is taken for dead). The
	// writer is taken per batch, so that such an echo goes between
	// batches; and the context is looked at between them, so that a
	// switch that reads slowly holds a convergence past its deadline by
	// one batch's write timeout at most.
	// refused gathers the changes the switch refused so far.
	refused := func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, p := range waits {
			var swErr *ofp13.Error
			switch {
			case errors.As(p.err, &swErr):
				res.Failed = append(res.Failed, &FlowError{Change: list[i], Err: swErr})
			case p.err != nil: // an error that did not decode (failAnswered)
				res.Failed = append(res.Failed, &FlowError{Change: list[i], Unreadable: p.err})
			}
		}
		if len(res.Failed) == 0 {
			return nil
		}
		// (A batch whose write failed partway is not in Sent, though
		// the switch may have refused some of it.)
		return &RefusedError{Failed: res.Failed, Of: max(res.Sent, len(res.Failed))}
	}
	// ended is what Apply returns when the convergence ends early: err,
	// and the refusals that came before it.
	ended := func(err error) (Result, error) {
		rerr := refused()
		return res, errors.Join(err, rerr)
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	select {
	case c.applying <- struct{}{}:
		defer func() { <-c.applying }()
	case <-c.retired:
		return res, errRetired
	case <-ctx.Done():
		return res, context.Cause(ctx)
	}
	go func() {
		select {
		case <-c.retired:
			stop(errRetired)
		case <-ctx.Done():
		}
	}()
	limit, target := firstBatchMods, c.opts.Keepalive/4
	var quickest time.Duration // the shortest batch's round trip: the link's share of each
	for start := 0; start < len(mods); {
		select {
		case <-c.retired: // (also when both were ready as the token was taken)
			return ended(fmt.Errorf("after %d of %d flow mods: %w", start, len(mods), errRetired))
		default:
		}
		if ctx.Err() != nil {
			return ended(fmt.Errorf("after %d of %d flow mods: %w", start, len(mods), context.Cause(ctx)))
		}
		end := start
		sent := time.Now()
		c.wmu.Lock()
		err := c.writeLocked(func(b []byte) ([]byte, error) {
			for end < len(mods) && end-start < limit && len(b) < maxBatch {
				var err error
				if b, err = mods[end].AppendBinary(b); err != nil {
					return nil, fmt.Errorf("encode %s: %w", list[end], err)
				}
				end++
			}
			return b, nil
		})
		c.wmu.Unlock()
		if err != nil {
			return ended(err)
		}
		res.Sent += end - start
		if c.opts.OnFlowMods != nil {
			c.opts.OnFlowMods(end - start)
		}
		if err := c.Barrier(ctx); err != nil {
			return ended(fmt.Errorf("barrier after %d of %d flow mods: %w", end, len(mods), err))
		}
		took := time.Since(sent)
		if quickest == 0 || took < quickest {
			quickest = took
		}
		limit = nextBatchMods(limit, end-start, took-quickest, target)
		start = end
	}
	// The barrier reply came after every error the flow mods caused.
	err := refused()
	return res, err
}

// Plan reads the owned flows of the switch and diffs them against the
// desired ones; it changes nothing.
func Plan(ctx context.Context, c *SwitchConn, desired []flows.Flow) (flows.Changes, error) {
	actual, err := c.ownedFlows(ctx, FlowReplyLimit(len(desired)))
	if err != nil {
		return flows.Changes{}, err
	}
	return flows.Diff(desired, actual), nil
}

// planSettled is Plan once no convergence is under way on c: a
// convergence sends its changes in batches (Apply), and a dump read
// between two of them shows the switch half-converged, its later batches
// as still to do although they are on their way. It waits for such a
// convergence to end, and holds the next one off until the dump is read.
func (c *SwitchConn) planSettled(ctx context.Context, desired []flows.Flow) (flows.Changes, error) {
	select {
	case c.applying <- struct{}{}:
		defer func() { <-c.applying }()
	case <-c.retired:
		return flows.Changes{}, errRetired
	case <-ctx.Done():
		return flows.Changes{}, fmt.Errorf("waiting for the convergence under way to end: %w", ctx.Err())
	}
	return Plan(ctx, c, desired)
}

// ConvergeOnce brings the owned flows of the switch to the desired set:
// dump, diff, send only the differences, barrier. An unchanged switch gets
// no flow mod at all.
func ConvergeOnce(ctx context.Context, c *SwitchConn, desired []flows.Flow) (Result, error) {
	changes, err := Plan(ctx, c, desired)
	if err != nil {
		return Result{}, err
	}
	return c.Apply(ctx, changes)
}

// RemoveOwnedFlows deletes every flow with the appliance's cookie prefix
// and waits for the barrier. Foreign flows stay.
func (c *SwitchConn) RemoveOwnedFlows(ctx context.Context) error {
	select {
	case c.applying <- struct{}{}:
		defer func() { <-c.applying }()
	case <-ctx.Done():
		return fmt.Errorf("waiting for the convergence under way to stop: %w", ctx.Err())
	}
	del := ofp13.NewFlowMod(ofp13.FlowDelete)
	del.TableID = ofp13.TableAll
	del.Cookie, del.CookieMask = flows.CookiePrefix, flows.CookieMask
	if err := c.send(del); err != nil {
		return err
	}
	return c.Barrier(ctx)
}

// errFraming marks decode errors that leave the stream unusable.
var errFraming = errors.New("framing")

// readMessage reads one message and returns it with its header, which
// says its size, and its transaction id even when the body is malformed.
func readMessage(br *bufio.Reader) (ofp13.Message, ofp13.Header, error) {
	hdr, err := br.Peek(ofp13.HeaderLen)
	if err != nil {
		return nil, ofp13.Header{}, err
	}
	h, err := ofp13.ParseHeader(hdr)
	if err != nil {
		return nil, ofp13.Header{}, fmt.Errorf("%w: %w", errFraming, err)
	}
	buf := make([]byte, h.Length)
	if _, err := io.ReadFull(br, buf); err != nil {
		return nil, ofp13.Header{}, err
	}
	m, err := ofp13.Unmarshal(buf)
	return m, h, err
}

// maxHandshakeMessage bounds each message before the features reply: a
// hello with its version bitmap, an echo, an error, the features reply
// itself. Switches send a few dozen bytes.
const maxHandshakeMessage = 4096

// readHandshakeMessage reads one message without read-ahead, so a peer
// not yet known to be a switch costs no buffer before it sent a header,
// and never more than maxHandshakeMessage bytes.
func readHandshakeMessage(r io.Reader) (ofp13.Message, error) {
	var hdr [ofp13.HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	h, err := ofp13.ParseHeader(hdr[:])
	if err != nil {
		return nil, err
	}
	if h.Length > maxHandshakeMessage {
		return nil, fmt.Errorf("%s of %d bytes during the handshake (at most %d)", h.Type, h.Length, maxHandshakeMessage)
	}
	buf := make([]byte, h.Length)
	copy(buf, hdr[:])
	if _, err := io.ReadFull(r, buf[ofp13.HeaderLen:]); err != nil {
		return nil, err
	}
	return ofp13.Unmarshal(buf)
}

func writeMessage(w io.Writer, m ofp13.Message) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
