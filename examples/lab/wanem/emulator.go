package wanem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Emulator joins two interfaces like a wire, shaping each direction with its
// own link. It runs once: New opens the sockets, Run forwards until its
// context ends and then closes them.
type Emulator struct {
	a, b   *port
	ab, ba *direction

	started   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	// dropsMu guards the kernel drop counters, which the kernel resets on
	// every read and which the emulator therefore accumulates itself.
	dropsMu sync.Mutex
}

// New opens AF_PACKET sockets on the interfaces ifA and ifB in the calling
// thread's network namespace. The sockets stay bound to that namespace, so a
// caller may switch namespaces around New and Run the emulator from anywhere.
func New(ifA, ifB string, cfg Config) (*Emulator, error) {
	if ifA == ifB {
		return nil, fmt.Errorf("wanem: interfaces a and b are both %q", ifA)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("wanem: %w", err)
	}
	a, err := openPort(ifA)
	if err != nil {
		return nil, fmt.Errorf("wanem: %w", err)
	}
	b, err := openPort(ifB)
	if err != nil {
		_ = a.close()
		return nil, fmt.Errorf("wanem: %w", err)
	}
	frameCap := max(a.mtu, b.mtu) + frameOverhead
	now := time.Now()
	return &Emulator{
		a:  a,
		b:  b,
		ab: newDirection(a, b, newLink(cfg.AtoB, 0, now), frameCap),
		ba: newDirection(b, a, newLink(cfg.BtoA, 1, now), frameCap),
	}, nil
}

// frameOverhead is the room a receive buffer keeps above the MTU for the
// Ethernet header and a VLAN tag or two, so that only frames an offload has
// glued together count as oversize.
const frameOverhead = 64

// Run forwards frames in both directions until ctx ends or a socket fails,
// then closes the sockets. It returns nil when ctx ended it.
func (e *Emulator) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("wanem: Run called twice")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	readErrs := make(chan error, 2)
	var wg sync.WaitGroup
	for _, d := range []*direction{e.ab, e.ba} {
		wg.Go(func() { readErrs <- d.readLoop() })
		wg.Go(func() { d.sendLoop(runCtx) })
	}

	var err error
	select {
	case <-runCtx.Done():
	case readErr := <-readErrs:
		err = fmt.Errorf("wanem: %w", readErr)
	}
	cancel()
	closeErr := e.Close()
	wg.Wait()
	if err != nil {
		return err
	}
	return closeErr
}

// Close closes the sockets. Run calls it on its way out; call it directly
// only for an Emulator that is never run.
func (e *Emulator) Close() error {
	e.closeOnce.Do(func() {
		e.collectKernelDrops()
		e.closeErr = errors.Join(e.a.close(), e.b.close())
		if e.closeErr != nil {
			e.closeErr = fmt.Errorf("wanem: close: %w", e.closeErr)
		}
	})
	return e.closeErr
}

// Stats returns the counters of both directions. It is safe to call while
// Run is forwarding.
func (e *Emulator) Stats() Stats {
	e.collectKernelDrops()
	e.dropsMu.Lock()
	abDrops, baDrops := e.a.kernelDrops, e.b.kernelDrops
	e.dropsMu.Unlock()
	s := Stats{
		AtoB:     e.ab.stats(),
		BtoA:     e.ba.stats(),
		AtoBName: e.a.name + "->" + e.b.name,
		BtoAName: e.b.name + "->" + e.a.name,
	}
	s.AtoB.KernelDrops = abDrops
	s.BtoA.KernelDrops = baDrops
	return s
}

func (e *Emulator) collectKernelDrops() {
	e.dropsMu.Lock()
	defer e.dropsMu.Unlock()
	for _, p := range []*port{e.a, e.b} {
		// A closed socket has nothing more to report.
		if drops, err := p.readKernelDrops(); err == nil {
			p.kernelDrops += drops
		}
	}
}

// direction moves frames read on one port through its link to the other
// port. One goroutine reads and offers, another releases and writes, so a
// slow write never stalls reading and the queue is where frames wait.
type direction struct {
	from, to *port
	frameCap int
	pool     sync.Pool

	mu   sync.Mutex
	link *link

	// kick wakes the sender when a frame arrives at an idle link.
	kick chan struct{}

	oversize   atomic.Uint64
	sendErrors atomic.Uint64
}

func newDirection(from, to *port, l *link, frameCap int) *direction {
	d := &direction{from: from, to: to, frameCap: frameCap, link: l, kick: make(chan struct{}, 1)}
	d.pool.New = func() any {
		buf := make([]byte, frameCap)
		return &buf
	}
	return d
}

func (d *direction) readLoop() error {
	for {
		buf := d.pool.Get().(*[]byte)
		n, err := d.from.recv(*buf)
		if err != nil {
			d.pool.Put(buf)
			return fmt.Errorf("read %s: %w", d.from.name, err)
		}
		if n > len(*buf) {
			d.oversize.Add(1)
			d.pool.Put(buf)
			continue
		}
		now := time.Now()
		d.mu.Lock()
		v := d.link.offer(now, frame{data: (*buf)[:n], buf: buf})
		d.mu.Unlock()
		if v != accepted {
			d.pool.Put(buf)
			continue
		}
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

func (d *direction) sendLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []frame
	for {
		now := time.Now()
		d.mu.Lock()
		d.link.release(now)
		batch = d.link.popReady(now, batch[:0])
		wake, pending := d.link.nextWake(now)
		d.mu.Unlock()

		if len(batch) > 0 {
			for i := range batch {
				if err := d.to.send(batch[i].data); err != nil {
					// Like a wire into a full or downed port: the frame is
					// gone, the link carries on.
					d.sendErrors.Add(1)
				}
				d.pool.Put(batch[i].buf)
				batch[i] = frame{}
			}
			// Writing took time; look again before sleeping.
			continue
		}

		if pending {
			timer.Reset(wake.Sub(now))
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-d.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (d *direction) stats() LinkStats {
	d.mu.Lock()
	s := d.link.snapshot()
	d.mu.Unlock()
	s.OversizeDropPackets = d.oversize.Load()
	s.SendErrors = d.sendErrors.Load()
	return s
}
