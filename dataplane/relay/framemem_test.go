package relay

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func bufAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestFrameMemoryCarvesDisjointBuffersAndReusesTheWarmestFirst(t *testing.T) {
	m := newFrameMemory()
	const size = 128<<10 + 40
	var got []*chunk
	for range 70 { // more than one slab's worth
		got = append(got, m.get(size))
	}
	type span struct{ lo, hi uintptr }
	var spans []span
	for _, c := range got {
		if len(c.buf) != size || cap(c.buf) != size {
			t.Fatalf("buffer of len %d cap %d, want %d: a write past its end would reach its neighbour", len(c.buf), cap(c.buf), size)
		}
		lo := bufAddr(c.buf)
		if lo%64 != 0 {
			t.Errorf("buffer at %#x is not cache-line aligned", lo)
		}
		spans = append(spans, span{lo, lo + size})
	}
	for i := range spans {
		for j := range i {
			if spans[i].lo < spans[j].hi && spans[j].lo < spans[i].hi {
				t.Fatalf("buffers %d and %d overlap: %#x and %#x", i, j, spans[i].lo, spans[j].lo)
			}
		}
	}
	// Each buffer is writable over its whole length.
	for _, c := range got {
		c.buf[0], c.buf[size-1] = 1, 2
	}
	m.put(got[3])
	m.put(got[9])
	if c := m.get(size); c != got[9] {
		t.Errorf("get after put gave %p, want the last returned %p", c, got[9])
	}
	if c := m.get(size); c != got[3] {
		t.Errorf("second get gave %p, want %p", c, got[3])
	}
	st := m.stats()
	if st.InUse != 70*size {
		t.Errorf("in use %d bytes, want %d", st.InUse, 70*size)
	}
}

// slabVMA finds the mapping holding addr in /proc/self/smaps and returns
// its start, end and fields.
func slabVMA(t *testing.T, addr uintptr) (lo, hi uintptr, fields map[string]string) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.Contains(k, " ") && !strings.Contains(k, "-") {
			if in {
				fields[k] = strings.TrimSpace(v)
			}
			continue
		}
		if in {
			return lo, hi, fields
		}
		var a, b uintptr
		if _, err := fmt.Sscanf(line, "%x-%x", &a, &b); err == nil && a <= addr && addr < b {
			in, lo, hi, fields = true, a, b, map[string]string{}
		}
	}
	if in {
		return lo, hi, fields
	}
	t.Fatalf("no mapping holds %#x", addr)
	return 0, 0, nil
}

func TestFrameSlabsAreHugePageAlignedAndAdvised(t *testing.T) {
	m := newFrameMemory()
	c := m.get(60000 + 40)
	addr := bufAddr(c.buf)
	if addr%hugePageSize != 0 {
		t.Fatalf("a fresh slab's first buffer is at %#x, not on a 2 MiB boundary", addr)
	}
	lo, hi, fields := slabVMA(t, addr)
	if lo%hugePageSize != 0 || (hi-lo)%hugePageSize != 0 {
		t.Errorf("slab mapping %#x-%#x is not whole 2 MiB pages", lo, hi)
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Logf("no THP on this kernel (%v): the slab is ordinary pages", err)
		return
	}
	if strings.Contains(string(mode), "[never]") {
		t.Logf("THP is off here (%s): the slab is ordinary pages", strings.TrimSpace(string(mode)))
		return
	}
	// THPeligible is 1 only with MADV_HUGEPAGE under "madvise".
	if fields["THPeligible"] != "1" {
		t.Errorf("slab mapping not eligible for huge pages (THP %q): %v", strings.TrimSpace(string(mode)), fields)
	}
}

// resident says how many of buf's whole pages are resident (mincore).
func resident(t *testing.T, buf []byte) (in, of int) {
	t.Helper()
	page := os.Getpagesize()
	start := int(bufAddr(buf))
	lo := roundUp(start, page) - start
	hi := (start+len(buf))&^(page-1) - start
	vec := make([]byte, (hi-lo)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, bufAddr(buf[lo:hi]), uintptr(hi-lo), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec)
}

func TestFrameTrimReleasesOnlySlabsFreeForAWholePeriod(t *testing.T) {
	m := newFrameMemory()
	const size = 128<<10 + 40
	fc := m.class(size)
	var got []*chunk
	for {
		c := m.get(size)
		for i := range c.buf {
			c.buf[i] = 0xAA
		}
		got = append(got, c)
		fc.mu.Lock()
		slabs := fc.mapped / frameSlabTarget
		fc.mu.Unlock()
		if slabs == 2 {
			break // the first buffer of the second slab
		}
	}
	first, second := got[:len(got)-1], got[len(got)-1:]
	per := int64(len(first))
	held := first[0]
	for _, c := range got[1:] {
		m.put(c)
	}
	now := time.Now()
	trim := func(period int) FrameMemoryStats {
		m.trim(now.Add(time.Duration(period) * frameTrimEvery))
		return m.stats()
	}
	// Period 1 saw every buffer in use: nothing is released.
	if st := trim(1); st.Released != 0 || st.InUse != size {
		t.Fatalf("after a busy period: %+v, want one buffer in use and none released", st)
	}
	// Period 2: the second slab stayed wholly free and goes; the first
	// holds a buffer in use and stays.
	if st := trim(2); st.Released != per*size || st.InUse != size || st.Free != (per-1)*size {
		t.Fatalf("after period 2: %+v, want the second slab (%d buffers) released", st, per)
	}
	check := func(bufs []*chunk, kept bool) {
		t.Helper()
		// Residency first: reading a released buffer maps the zero
		// page, a huge one for its whole 2 MiB.
		for _, c := range bufs {
			if in, of := resident(t, c.buf); kept && in != of || !kept && in != 0 {
				t.Fatalf("a buffer has %d of %d pages resident, want it kept: %v", in, of, kept)
			}
		}
		want := byte(0)
		if kept {
			want = 0xAA
		}
		for _, c := range bufs {
			if got := c.buf[len(c.buf)/2]; got != want {
				t.Fatalf("a buffer reads %#x, want %#x (kept: %v)", got, want, kept)
			}
		}
	}
	check(first[1:], true)
	check(second, false)
	// The held buffer comes back during period 3: the first slab was not
	// free throughout it.
	m.put(held)
	if st := trim(3); st.Released != per*size {
		t.Fatalf("after period 3: %+v, want still only the second slab released", st)
	}
	check(first[1:], true)
	// Period 4 it was: now both are released.
	if st := trim(4); st.Released != 2*per*size || st.Free != 0 || st.InUse != 0 {
		t.Fatalf("after period 4: %+v, want both slabs released", st)
	}
	check(first, false)
	// Calls within a period do nothing more, and released buffers serve
	// again without a new slab.
	m.trim(now.Add(4*frameTrimEvery + time.Second))
	for range 2 * per {
		c := m.get(size)
		c.buf[0], c.buf[len(c.buf)-1] = 1, 1
	}
	fc.mu.Lock()
	mapped := fc.mapped
	fc.mu.Unlock()
	if st := m.stats(); st.InUse != 2*per*size || st.Released != 0 || mapped != 2*frameSlabTarget {
		t.Errorf("all taken again: %+v, %d bytes mapped", st, mapped)
	}
}

func TestDroppedFrameBufferIsReclaimed(t *testing.T) {
	m := newFrameMemory()
	const size = 60000 + 40
	keep := m.get(size)
	func() {
		for range 40 {
			_ = m.get(size) // dropped without put: an aborted session's queue
		}
	}()
	before := m.stats()
	if before.InUse != 41*size {
		t.Fatalf("in use %d, want %d", before.InUse, 41*size)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.stats().InUse > size {
		if time.Now().After(deadline) {
			t.Fatalf("dropped buffers not reclaimed: %+v", m.stats())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	// Churn: taking and dropping many times never maps more.
	fc := m.class(size)
	fc.mu.Lock()
	mapped := fc.mapped
	fc.mu.Unlock()
	for range 20 {
		func() {
			for range 30 {
				_ = m.get(size)
			}
		}()
		for m.stats().InUse > size {
			if time.Now().After(deadline) {
				t.Fatalf("dropped buffers not reclaimed: %+v", m.stats())
			}
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
	}
	fc.mu.Lock()
	after := fc.mapped
	fc.mu.Unlock()
	if after != mapped {
		t.Errorf("churn of dropped buffers mapped %d more bytes", after-mapped)
	}
	runtime.KeepAlive(keep)
}

func TestFrameMemoryWithoutSlabsUsesTheHeap(t *testing.T) {
	m := newFrameMemory()
	m.mapSlab = func(int) ([]byte, error) { return nil, errors.New("mmap refused") }
	c := m.get(1000)
	if len(c.buf) != 1000 {
		t.Fatalf("buffer of %d bytes, want 1000", len(c.buf))
	}
	c.buf[999] = 1
	m.put(c)
	if d := m.get(1000); d != c {
		t.Errorf("heap buffer not reused")
	}
	m.put(c)
	m.trim(time.Now().Add(frameTrimEvery))
	m.trim(time.Now().Add(2 * frameTrimEvery)) // releasing a heap buffer's pages is harmless
	if st := m.stats(); st.Free+st.Released != 1000 {
		t.Errorf("stats %+v, want 1000 bytes free", st)
	}
}

// A free chunk must not keep its last session reachable (its streams,
// codecs and the frames it dropped) for as long as it waits.
func TestReturnedFrameForgetsItsSession(t *testing.T) {
	m := newFrameMemory()
	c := m.get(60000 + 40)
	st := &stream{}
	c.on, c.busy, c.ackedBy, c.n = st, true, true, 100
	c.sealedOn = append(c.sealedOn, st, st)
	m.put(c)
	d := m.get(60000 + 40)
	if d != c {
		t.Fatal("the chunk was not reused")
	}
	if d.on != nil || d.busy || d.ackedBy || d.n != 0 || len(d.sealedOn) != 0 {
		t.Errorf("a returned chunk kept its state: %+v", d)
	}
	for i, s := range d.sealedOn[:cap(d.sealedOn)] {
		if s != nil {
			t.Errorf("sealedOn[%d] still points at a stream", i)
		}
	}
	if d.slab == nil {
		t.Error("a returned chunk lost its slab")
	}
}
