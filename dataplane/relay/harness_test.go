package relay

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// helpers are the roles this test binary runs as a child process instead
// of running tests (testsupport.Command): a benchmark's traffic source and
// sink, or, in the network namespace test, an agent or an HTTP file server.
// The file that uses a role registers it from init.
var helpers = testsupport.Children{}

func TestMain(m *testing.M) {
	testsupport.RunChild(helpers)
	goleak.VerifyTestMain(m)
}

// helper makes a role that fails with an error a child that exits 1.
func helper(run func(args []string) error) func([]string) int {
	return func(args []string) int {
		if err := run(args); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		return 0
	}
}

var testPSK = []byte("relay test pre-shared key, 32 b.")

// testLogger logs to the test at warn level, or debug with RELAY_DEBUG=1.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("RELAY_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

// infoLogger logs at Info level to the test's log and to a buffer the
// test may read while the agents write.
func infoLogger(t testing.TB) (*slog.Logger, *testsupport.LockedBuffer) {
	logs := &testsupport.LockedBuffer{}
	return slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo})), logs
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// loopbackTransparency stands in for TPROXY on loopback: a plain listener
// whose connections all "went to" dst, and a server connection from the
// agent's own address.
func loopbackTransparency(dst netip.AddrPort) transparency {
	return transparency{
		listen: func(ctx context.Context, addr netip.AddrPort) (*net.TCPListener, error) {
			return listenPlain(ctx, addr, streamTuning{})
		},
		destination: func(*net.TCPConn) netip.AddrPort { return dst },
		dial:        dialPlain,
	}
}

// endServer is the test's end server: it runs handle for every connection.
type endServer struct {
	ln     *net.TCPListener
	addr   netip.AddrPort
	mu     sync.Mutex
	handle func(c *net.TCPConn)
	conns  int
	wg     sync.WaitGroup
}

func newEndServer(t testing.TB, handle func(c *net.TCPConn)) *endServer {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &endServer{ln: ln, addr: ln.Addr().(*net.TCPAddr).AddrPort(), handle: handle}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			h := s.handle
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				h(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *endServer) setHandler(h func(c *net.TCPConn)) {
	s.mu.Lock()
	s.handle = h
	s.mu.Unlock()
}

func (s *endServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

type pairOptions struct {
	streams, chunk, queue int
	encryption            string
	limitsA, limitsB      Limits
	socketBuffer          int
	congestion            string
	// viaMITM puts a frame-aware man in the middle between the agents.
	viaMITM bool
	// quiet discards the agents' logs (a fuzz target may not log through
	// its F).
	quiet bool
	// logger, if set, takes the agents' logs instead of the test's log.
	logger *slog.Logger
	// serverWhitelist, if set, derives the server-side agent's whitelist
	// from the client side's entry.
	serverWhitelist func(entry Whitelist) []Whitelist
	// pool is the client-side entry's warm pool.
	pool agentspec.Pool
	// autoStreams makes the entry streams = "auto" (streams its maximum).
	autoStreams bool
	// troubleA, if set, is the client-side agent's testTrouble, set
	// before it starts (a write after Start races its sessions' reads).
	troubleA func(stream int) lossState
	// configA and configB, if set, change the agents' configurations
	// before they start.
	configA, configB func(*Config)
}

// timedOut is a troubleA that puts the streams stuck picks in loss
// recovery after a timeout (TCP_INFO's Loss), the rest out of recovery.
func timedOut(stuck func(stream int) bool) func(stream int) lossState {
	return func(stream int) lossState {
		if stuck(stream) {
			return lossTimeout
		}
		return lossNone
	}
}

// pair is a client-side agent A and a server-side agent B on loopback, in
// front of an end server.
type pair struct {
	a, b   *Agent
	wlB    []Whitelist    // the server-side agent's whitelist
	entry  netip.AddrPort // connect here as the client
	server *endServer
	mitm   *mitm
	// poolMin is the client side's pool's MinIdle (pooledPair).
	poolMin int
}

func startPair(t testing.TB, opt pairOptions, handle func(c *net.TCPConn)) *pair {
	t.Helper()
	if opt.streams == 0 {
		opt.streams = 8
	}
	if opt.chunk == 0 {
		opt.chunk = 60000
	}
	if opt.queue == 0 {
		opt.queue = 5
	}
	if opt.queue < 0 {
		opt.queue = 0 // no bound on the receive window
	}
	srv := newEndServer(t, handle)
	entry := Whitelist{
		Name:        "test",
		Clients:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Server:      srv.addr.Addr(),
		Port:        srv.addr.Port(),
		Streams:     opt.streams,
		ChunkSize:   opt.chunk,
		QueueLength: opt.queue,
		AutoStreams: opt.autoStreams,
		PeerName:    "agent-a",
	}
	wlB := []Whitelist{entry}
	if opt.serverWhitelist != nil {
		wlB = opt.serverWhitelist(entry)
	}
	log := testLogger(t)
	if opt.quiet {
		log = slog.New(slog.DiscardHandler)
	}
	if opt.logger != nil {
		log = opt.logger
	}
	cfgB := Config{
		Name:         "agent-b",
		DataListen:   netip.MustParseAddrPort("127.0.0.1:0"),
		PSK:          testPSK,
		Encryption:   opt.encryption,
		Server:       wlB,
		Limits:       opt.limitsB,
		SocketBuffer: opt.socketBuffer,
		Congestion:   opt.congestion,
	}
	if opt.configB != nil {
		opt.configB(&cfgB)
	}
	b := startAgentLogging(t, cfgB, srv.addr, log)
	p := &pair{b: b, server: srv, wlB: wlB}
	entry.Peer, entry.PeerName = b.Addrs().Data, "agent-b"
	entry.Pool = opt.pool
	if opt.viaMITM {
		p.mitm = newMITM(t, entry.Peer)
		entry.Peer = p.mitm.addr
	}
	cfgA := Config{
		Name:              "agent-a",
		TransparentListen: netip.MustParseAddrPort("127.0.0.1:0"),
		PSK:               testPSK,
		Encryption:        opt.encryption,
		Client:            []Whitelist{entry},
		Limits:            opt.limitsA,
		SocketBuffer:      opt.socketBuffer,
		Congestion:        opt.congestion,
	}
	if opt.configA != nil {
		opt.configA(&cfgA)
	}
	p.a = startAgentWith(t, cfgA, srv.addr, log, func(a *Agent) { a.testTrouble = opt.troubleA })
	p.entry = p.a.Addrs().Transparent
	return p
}

func startAgent(t testing.TB, cfg Config, dst netip.AddrPort) *Agent {
	t.Helper()
	return startAgentLogging(t, cfg, dst, testLogger(t))
}

func startAgentLogging(t testing.TB, cfg Config, dst netip.AddrPort, log *slog.Logger) *Agent {
	t.Helper()
	return startAgentWith(t, cfg, dst, log, nil)
}

// startAgentWith is startAgentLogging that lets prep set the agent's test
// hooks before it starts.
func startAgentWith(t testing.TB, cfg Config, dst netip.AddrPort, log *slog.Logger, prep func(*Agent)) *Agent {
	t.Helper()
	a, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	a.os = loopbackTransparency(dst)
	if prep != nil {
		prep(a)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil && !strings.Contains(err.Error(), "already shut down") {
			t.Logf("shutdown: %v", err)
		}
	})
	return a
}

func (p *pair) dial(t testing.TB) *net.TCPConn {
	t.Helper()
	c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.entry))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pattern is a reproducible pseudo-random byte stream.
type pattern struct{ *rand.ChaCha8 }

func newPattern(seed uint64) pattern {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return pattern{rand.NewChaCha8(s)}
}

// sendPattern writes n bytes of the pattern in writes of random size with
// occasional short pauses, hashing what it sends.
func sendPattern(w io.Writer, seed uint64, n int64, rng *rand.Rand, pauses bool) ([]byte, error) {
	p := newPattern(seed)
	h := sha256.New()
	buf := make([]byte, 256<<10)
	for n > 0 {
		size := min(int64(1+rng.IntN(len(buf))), n)
		if rng.IntN(4) == 0 {
			size = min(int64(1+rng.IntN(64)), n)
		}
		b := buf[:size]
		_, _ = p.Read(b)
		h.Write(b)
		if _, err := w.Write(b); err != nil {
			return nil, err
		}
		n -= size
		if pauses && rng.IntN(500) == 0 {
			time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
		}
	}
	return h.Sum(nil), nil
}

// receiveAll reads to EOF in reads of random size with occasional pauses,
// hashing what it gets.
func receiveAll(r io.Reader, rng *rand.Rand, pauses bool) (int64, []byte, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var total int64
	for {
		size := 1 + rng.IntN(len(buf))
		n, err := r.Read(buf[:size])
		h.Write(buf[:n])
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, h.Sum(nil), nil
		}
		if err != nil {
			return total, h.Sum(nil), err
		}
		if pauses && rng.IntN(500) == 0 {
			time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
		}
	}
}

// prefixHash hashes the first n bytes of a pattern, to check a truncated
// transfer delivered only genuine bytes.
func prefixHash(seed uint64, n int64) []byte {
	p := newPattern(seed)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for n > 0 {
		b := buf[:min(n, int64(len(buf)))]
		_, _ = p.Read(b)
		h.Write(b)
		n -= int64(len(b))
	}
	return h.Sum(nil)
}

// hashingReader records what passes through.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	hr.n += int64(n)
	return n, err
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
