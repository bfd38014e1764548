package relay

import (
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Frame memory. Every byte a relay carries is copied into a frame buffer,
// sealed or opened there, and copied out: at 8 Gbit/s on loopback the
// buffers of one session of 8 stripes (its receive window and its send
// retention, about 130 frames of 128 KiB once the window grew) are some
// 4,000 pages of 4 KiB, more than a core's TLB reaches, and the AES-GCM
// passes and the copies over them ran 8-12 % slower than over the 50
// frames the relay kept before the send retention (BenchmarkRelay). So
// frame buffers are carved out of slabs of whole 2 MiB pages that the
// kernel is asked to back with transparent huge pages (MADV_HUGEPAGE;
// with THP off or "never" they are ordinary pages), outside the Go heap.
//
// Buffers are recycled process-wide, per size, warmest first. A buffer
// that no session holds stays mapped: it is never unmapped, so a stale
// slice of it can never fault the process. A slab whose buffers all
// stayed free for a whole trim period has its pages handed back to the
// kernel (MADV_DONTNEED: they read as zeros and fault in again, as huge
// pages, when next used), so an idle agent does not keep its busiest
// moment's memory; slabs are released whole, because releasing part of a
// huge page splits it into small ones. A chunk a session dropped without
// returning it gives its buffer back when the garbage collector finds it
// unreachable (a session returns what it retained when it ends; this is
// for the rest).

// frameSlabTarget is the size a slab aims at: several frames of the
// common chunk sizes per 2 MiB page, few slabs per session.
const frameSlabTarget = 8 << 20

const hugePageSize = 2 << 20

// frameTrimEvery is the trim period: frames free throughout one are
// released.
const frameTrimEvery = 10 * time.Second

type frameClass struct {
	size   int // buffer length
	stride int // distance between buffers in a slab: size rounded to a cache line

	mu       sync.Mutex
	free     []*chunk // a stack: the most recently returned on top
	released int      // free[:released] had their pages released
	minFree  int      // the fewest free buffers since the last trim
	frames   int      // buffers handed out or free (slab or heap)
	mapped   int64    // slab bytes mapped
}

// frameSlab is one mapping of a class's buffers.
type frameSlab struct {
	mem    []byte
	frames int
}

type frameMemory struct {
	mu       sync.Mutex
	classes  map[int]*frameClass
	lastTrim time.Time
	// mapSlab maps a slab (nil: mmapSlab); tests make it fail.
	mapSlab func(size int) ([]byte, error)
}

// frames is the process's frame memory: sessions of every agent in the
// process share it, as they share the agent memory caps' accounting.
var frames = newFrameMemory()

func newFrameMemory() *frameMemory {
	return &frameMemory{classes: map[int]*frameClass{}, lastTrim: time.Now(), mapSlab: mmapSlab}
}

func (m *frameMemory) class(size int) *frameClass {
	m.mu.Lock()
	defer m.mu.Unlock()
	fc := m.classes[size]
	if fc == nil {
		fc = &frameClass{size: size, stride: roundUp(size, 64)}
		m.classes[size] = fc
	}
	return fc
}

// get returns a buffer of size bytes, reused if one is free.
func (m *frameMemory) get(size int) *chunk {
	fc := m.class(size)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.free) == 0 {
		m.carve(fc)
	}
	n := len(fc.free) - 1
	c := fc.free[n]
	fc.free[n] = nil
	fc.free = fc.free[:n]
	fc.released = min(fc.released, n)
	fc.minFree = min(fc.minFree, n)
	return c
}

// put returns a buffer that get handed out. The chunk forgets its
// session: a free chunk pointing at a stream would keep the session (and
// every chunk it dropped) reachable for as long as the chunk waits.
func (m *frameMemory) put(c *chunk) {
	sealed := c.sealedOn[:cap(c.sealedOn)]
	clear(sealed)
	*c = chunk{buf: c.buf, slab: c.slab, sealedOn: sealed[:0]}
	fc := m.class(len(c.buf))
	fc.mu.Lock()
	fc.free = append(fc.free, c)
	fc.mu.Unlock()
}

// carve adds a slab's buffers to the free list (fc.mu held). If no slab
// can be mapped, one buffer comes from the Go heap.
func (m *frameMemory) carve(fc *frameClass) {
	per := max(frameSlabTarget/fc.stride, 1)
	size := roundUp(per*fc.stride, hugePageSize)
	per = size / fc.stride
	mem, err := m.mapSlab(size)
	if err != nil {
		// The collector frees a dropped heap buffer; it only leaves the
		// count.
		fc.frames++
		c := &chunk{buf: make([]byte, fc.size)}
		runtime.AddCleanup(c, fc.forget, 0)
		fc.free = append(fc.free, c)
		return
	}
	slab := &frameSlab{mem: mem, frames: per}
	fc.mapped += int64(size)
	fc.frames += per
	// Pushed in reverse so that get hands out the slab in address order.
	for i := per - 1; i >= 0; i-- {
		fc.free = append(fc.free, fc.newChunk(slab, mem[i*fc.stride:i*fc.stride+fc.size:i*fc.stride+fc.size]))
	}
}

// slabBuffer is a slab buffer without its chunk.
type slabBuffer struct {
	slab *frameSlab
	buf  []byte
}

// newChunk wraps a slab buffer in a chunk that gives the buffer back if
// it is dropped instead of returned.
func (fc *frameClass) newChunk(slab *frameSlab, buf []byte) *chunk {
	c := &chunk{buf: buf, slab: slab}
	runtime.AddCleanup(c, fc.reclaim, slabBuffer{slab, buf})
	return c
}

// reclaim returns the buffer of a chunk that became unreachable without
// being put back: nothing can touch it any more.
func (fc *frameClass) reclaim(b slabBuffer) {
	fc.mu.Lock()
	fc.free = append(fc.free, fc.newChunk(b.slab, b.buf))
	fc.mu.Unlock()
}

// forget counts out a dropped heap buffer.
func (fc *frameClass) forget(int) {
	fc.mu.Lock()
	fc.frames--
	fc.mu.Unlock()
}

// trim releases the slabs that stayed free for a whole trim period (at
// most once per period, whoever calls it).
func (m *frameMemory) trim(now time.Time) {
	m.mu.Lock()
	due := now.Sub(m.lastTrim) >= frameTrimEvery
	if due {
		m.lastTrim = now
	}
	m.mu.Unlock()
	if !due {
		return
	}
	for _, fc := range m.snapshot() {
		fc.trim()
	}
}

// snapshot lists the classes, so that each is then locked alone.
func (m *frameMemory) snapshot() []*frameClass {
	m.mu.Lock()
	defer m.mu.Unlock()
	classes := make([]*frameClass, 0, len(m.classes))
	for _, fc := range m.classes {
		classes = append(classes, fc)
	}
	return classes
}

// trim releases the slabs whose buffers are all free and were free for
// the whole period: the buffers below the period's low-water mark of the
// free stack, or released before. The pages are handed back outside the
// class's lock, with those buffers out of the free list meanwhile.
func (fc *frameClass) trim() {
	fc.mu.Lock()
	lo, hi := fc.released, min(fc.minFree, len(fc.free))
	fc.minFree = len(fc.free)
	idle := map[*frameSlab]int{}
	for _, c := range fc.free[:hi] {
		if c.slab != nil {
			idle[c.slab]++
		}
	}
	var take []*chunk
	keep := fc.free[:lo]
	for _, c := range fc.free[lo:hi] {
		if c.slab != nil && idle[c.slab] == c.slab.frames {
			take = append(take, c)
		} else {
			keep = append(keep, c)
		}
	}
	if len(take) == 0 {
		fc.mu.Unlock()
		return
	}
	// keep overwrote free[lo:] in place; the rest of the stack follows.
	n := len(fc.free)
	fc.free = append(keep, fc.free[hi:]...)
	clear(fc.free[len(fc.free):n])
	fc.frames -= len(take) // out of the books while released
	fc.mu.Unlock()

	done := map[*frameSlab]bool{}
	for _, c := range take {
		if !done[c.slab] {
			done[c.slab] = true
			_ = unix.Madvise(c.slab.mem, unix.MADV_DONTNEED)
		}
	}

	fc.mu.Lock()
	at := min(fc.released, len(fc.free))
	fc.free = slices.Insert(fc.free, at, take...)
	fc.released = at + len(take)
	fc.frames += len(take)
	fc.minFree = min(fc.minFree+len(take), len(fc.free))
	fc.mu.Unlock()
}

// FrameMemoryStats is the process's frame buffer memory, in bytes: held
// by sessions, free and resident, and free with its pages released
// (mapped, not resident). Buffers of a slab that could not be mapped
// count as held or free like the others.
type FrameMemoryStats struct {
	InUse, Free, Released int64
}

// FrameMemory reports the process's frame buffer memory.
func FrameMemory() FrameMemoryStats { return frames.stats() }

func (m *frameMemory) stats() FrameMemoryStats {
	var st FrameMemoryStats
	for _, fc := range m.snapshot() {
		fc.mu.Lock()
		size := int64(fc.size)
		st.InUse += int64(fc.frames-len(fc.free)) * size
		st.Free += int64(len(fc.free)-fc.released) * size
		st.Released += int64(fc.released) * size
		fc.mu.Unlock()
	}
	return st
}

// mmapSlab maps size bytes (a multiple of 2 MiB) aligned to 2 MiB, so
// that every 2 MiB of it can be one huge page, and asks for huge pages.
func mmapSlab(size int) ([]byte, error) {
	length := uintptr(size + hugePageSize)
	p, err := unix.MmapPtr(-1, 0, nil, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	addr := uintptr(p)
	start := (addr + hugePageSize - 1) &^ (hugePageSize - 1)
	// Unmap the unaligned head and tail; what is left is the slab.
	if head := start - addr; head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	if tail := addr + length - (start + uintptr(size)); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, start-addr+uintptr(size)), tail)
	}
	slab := unsafe.Slice((*byte)(unsafe.Add(p, start-addr)), size)
	// Not fatal: without THP (or with it set to "never") the slab is
	// ordinary pages.
	_ = unix.Madvise(slab, unix.MADV_HUGEPAGE)
	return slab, nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
