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

func TestFrameTrimReleasesOnlyBuffersFreeForAWholePeriod(t *testing.T) {
	m := newFrameMemory()
	const size = 128<<10 + 40
	var got []*chunk
	for range 20 {
		c := m.get(size)
		for i := range c.buf {
			c.buf[i] = 0xAA
		}
		got = append(got, c)
	}
	for _, c := range got {
		m.put(c)
	}
	// The slab holds more than the 20 taken: the rest are free too.
	fc := m.class(size)
	fc.mu.Lock()
	frames := int64(fc.frames)
	fc.mu.Unlock()
	now := time.Now()
	// The first period saw the buffers in use: nothing is released.
	m.trim(now.Add(frameTrimEvery))
	if st := m.stats(); st.Released != 0 || st.Free != frames*size {
		t.Fatalf("after a busy period: %+v, want all %d free and none released", st, frames)
	}
	// Five are taken and returned during the second period: the 15
	// below them stayed free throughout.
	var busy []*chunk
	for range 5 {
		busy = append(busy, m.get(size))
	}
	for _, c := range busy {
		m.put(c)
	}
	m.trim(now.Add(2 * frameTrimEvery))
	st := m.stats()
	if st.Released != (frames-5)*size || st.Free != 5*size || st.InUse != 0 {
		t.Fatalf("after an idle period: %+v, want %d released and 5 free", st, frames-5)
	}
	released, kept := 0, 0
	for _, c := range got {
		in, of := resident(t, c.buf)
		switch {
		case in == 0:
			released++
			if c.buf[len(c.buf)/2] != 0 {
				t.Errorf("a released buffer still reads %#x", c.buf[len(c.buf)/2])
			}
		case in == of:
			kept++
			if c.buf[len(c.buf)/2] != 0xAA {
				t.Errorf("a kept buffer lost its contents")
			}
		default:
			t.Errorf("a buffer has %d of %d pages resident", in, of)
		}
	}
	if released != 15 || kept != 5 {
		t.Errorf("%d buffers released and %d resident, want 15 and 5", released, kept)
	}
	// Calls within the period do nothing more.
	m.trim(now.Add(2*frameTrimEvery + time.Second))
	// A released buffer is usable again.
	for range 20 {
		c := m.get(size)
		c.buf[0], c.buf[len(c.buf)-1] = 1, 1
	}
	if st := m.stats(); st.InUse != 20*size || st.Released != (frames-20)*size {
		t.Errorf("20 taken again: %+v", st)
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
