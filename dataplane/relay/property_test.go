package relay

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// duplexResult is what both end hosts saw of one session.
type duplexResult struct {
	upSent, upGot     []byte // sha256 of client -> server bytes
	downSent, downGot []byte // sha256 of server -> client bytes
	upN, downN        int64  // bytes received at each end
	clientErr, srvErr error
}

// duplex runs one session that moves up bytes client -> server and down
// bytes server -> client at the same time, with random write and read
// sizes and pauses on both end hosts, and returns both ends' hashes.
func duplex(t *testing.T, p *pair, seed uint64, up, down int64, pauses bool) duplexResult {
	t.Helper()
	var res duplexResult
	var wg sync.WaitGroup
	srvDone := make(chan struct{})
	p.server.setHandler(func(c *net.TCPConn) {
		defer close(srvDone)
		defer c.Close()
		rng := rand.New(rand.NewPCG(seed, 2))
		var inner sync.WaitGroup
		inner.Add(1)
		go func() {
			defer inner.Done()
			var err error
			res.upN, res.upGot, err = receiveAll(c, rand.New(rand.NewPCG(seed, 3)), pauses)
			if err != nil {
				res.srvErr = fmt.Errorf("server read: %w", err)
			}
		}()
		var err error
		res.downSent, err = sendPattern(c, seed+1, down, rng, pauses)
		if err != nil {
			res.srvErr = fmt.Errorf("server write: %w", err)
			inner.Wait()
			return
		}
		_ = c.CloseWrite()
		inner.Wait()
	})
	c := p.dial(t)
	defer c.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		res.upSent, err = sendPattern(c, seed, up, rand.New(rand.NewPCG(seed, 4)), pauses)
		if err != nil {
			res.clientErr = fmt.Errorf("client write: %w", err)
			return
		}
		_ = c.CloseWrite()
	}()
	n, h, err := receiveAll(c, rand.New(rand.NewPCG(seed, 5)), pauses)
	res.downN, res.downGot = n, h
	if err != nil && res.clientErr == nil {
		res.clientErr = fmt.Errorf("client read: %w", err)
	}
	wg.Wait()
	<-srvDone
	return res
}

func (r duplexResult) check(t *testing.T, up, down int64) {
	t.Helper()
	if r.clientErr != nil || r.srvErr != nil {
		t.Fatalf("client: %v; server: %v", r.clientErr, r.srvErr)
	}
	if r.upN != up || !bytes.Equal(r.upSent, r.upGot) {
		t.Fatalf("client -> server: %d of %d bytes, sha256 sent %x got %x", r.upN, up, r.upSent, r.upGot)
	}
	if r.downN != down || !bytes.Equal(r.downSent, r.downGot) {
		t.Fatalf("server -> client: %d of %d bytes, sha256 sent %x got %x", r.downN, down, r.downSent, r.downGot)
	}
}

// TestRelayRandomizedGiB is the property test: sessions with random stream
// counts (one stream among them), chunk sizes, queue lengths (none, the
// default, among them) and encryption, end hosts writing and
// reading random sizes with random pauses, more than 1 GiB in each
// direction in total; every byte must arrive, in order (sha256 at both
// ends). Some sessions run through a man in the middle that delays frames
// at random, so streams overtake each other and the window fills. With
// -short the volume is 64 MiB. RELAY_SEED reproduces a run.
func TestRelayRandomizedGiB(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RELAY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("RELAY_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	total := int64(1<<30 + 1<<20)
	if testing.Short() {
		total = 64 << 20
	}

	type plan struct {
		opt     pairOptions
		bytes   int64
		delayed bool
	}
	enc := func() string {
		if rng.IntN(3) == 0 {
			return EncryptionNone
		}
		return EncryptionAESGCM
	}
	// Edge shapes first, small volumes: one stream, window of one frame,
	// tiny chunks, many streams with a tiny window.
	plans := []plan{
		{opt: pairOptions{streams: 1, chunk: 1, queue: 1, encryption: enc()}, bytes: 64 << 10},
		{opt: pairOptions{streams: 64, chunk: 1 + rng.IntN(512), queue: 1, encryption: enc()}, bytes: 4 << 20},
		{opt: pairOptions{streams: 1 + rng.IntN(64), chunk: 1 + rng.IntN(4096), queue: 1 + rng.IntN(3), encryption: enc()}, bytes: 8 << 20, delayed: true},
		{opt: pairOptions{streams: 16, chunk: 8192 + rng.IntN(65536), queue: 1, encryption: enc(), viaMITM: true}, bytes: 32 << 20, delayed: true},
		// One stream, window bounded by memory only.
		{opt: pairOptions{streams: 1, chunk: 4096 + rng.IntN(128<<10), queue: -1, encryption: enc()}, bytes: 64 << 20},
	}
	var planned int64
	for _, pl := range plans {
		planned += pl.bytes
	}
	// Bulk shapes carry the rest.
	for planned < total {
		n := min(total-planned, int64(128<<20+rng.IntN(256<<20)))
		plans = append(plans, plan{opt: pairOptions{
			// queue -1: no bound on the window (the default now).
			streams: 1 + rng.IntN(64), chunk: 4096 + rng.IntN(256<<10), queue: []int{-1, -1, 1, 3, 5}[rng.IntN(5)], encryption: enc(),
		}, bytes: n})
		planned += n
	}

	var upTotal, downTotal int64
	for i, pl := range plans {
		opt := pl.opt
		if pl.delayed {
			opt.viaMITM = true
		}
		name := fmt.Sprintf("%d/streams=%d,chunk=%d,queue=%d,%s,delayed=%v", i, opt.streams, opt.chunk, opt.queue, opt.encryption, pl.delayed)
		t.Run(name, func(t *testing.T) {
			p := startPair(t, opt, echo)
			if pl.delayed {
				var mu sync.Mutex
				drng := rand.New(rand.NewPCG(seed, uint64(i)))
				p.mitm.delay = func() time.Duration {
					mu.Lock()
					defer mu.Unlock()
					if drng.IntN(50) == 0 {
						return time.Duration(drng.IntN(2000)) * time.Microsecond
					}
					return 0
				}
			}
			// The two directions get different volumes so a mix-up shows.
			up, down := pl.bytes, pl.bytes-int64(rng.IntN(1000))
			res := duplex(t, p, seed+uint64(i)*10, up, down, pl.bytes < 64<<20)
			res.check(t, up, down)
			upTotal += up
			downTotal += down
			testsupport.Eventually(t, 30*time.Second, "both agents to complete the session", func() bool {
				return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
			})
			st := p.b.Stats().Totals
			if st.BytesUp != uint64(up) || st.BytesDown != uint64(down) {
				t.Errorf("server-side agent counted %d up, %d down", st.BytesUp, st.BytesDown)
			}
		})
	}
	t.Logf("moved %d bytes up and %d down in %d sessions", upTotal, downTotal, len(plans))
	if !t.Failed() && (upTotal < total-int64(len(plans))*1000 || downTotal < total-int64(len(plans))*1000) {
		t.Fatalf("moved only %d up, %d down", upTotal, downTotal)
	}
}
