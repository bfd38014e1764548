package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// walkPages reads the pages the meta page m leads to, from the file and
// not through bbolt's mapping, and checks that every one lies within the
// file and every element within its page: bbolt trusts all of it, and a
// damaged free list, a key offset or an overflow count past the end, or a
// page that names itself as its child, made bbolt fault in a goroutine of
// its own (tx.Check's, which no recover reaches) or grow memory without
// bound. It reads each page once; a page reached twice is damage.
func walkPages(f *os.File, m boltMeta, path string) error {
	w := pageWalk{f: f, size: int64(m.pageSize), pages: m.pages, seen: map[uint64]bool{}, path: path}
	if m.freelist != noFreelist {
		if err := w.freelistPage(m.freelist); err != nil {
			return err
		}
	}
	if _, err := w.tree(m.root, 0, nil, nil); err != nil {
		return err
	}
	return w.freeInUse()
}

// bbolt's page layout: a 16-byte header (id, flags, count, overflow), then
// count elements of 16 bytes, whose keys and values lie after them at
// offsets counted from each element.
const (
	pageHeader       = 16
	pageElement      = 16
	branchPage       = 0x01
	leafPage         = 0x02
	freelistPage     = 0x10
	bucketLeaf       = 0x01
	bucketHeader     = 16 // root page, sequence
	noFreelist       = ^uint64(0)
	maxTreeDepth     = 64
	freelistCountMax = 0xFFFF
)

type pageWalk struct {
	f     *os.File
	size  int64
	pages uint64
	seen  map[uint64]bool // pages in use: the tree's and the free list's, with their overflow
	free  []uint64        // the ids the free list names
	path  string
}

func (w *pageWalk) corrupt(format string, args ...any) error {
	return &CorruptError{Path: w.path, Reason: fmt.Sprintf(format, args...)}
}

// read returns page id with its overflow pages.
func (w *pageWalk) read(id uint64, what string) ([]byte, error) {
	if id < 2 || id >= w.pages {
		return nil, w.corrupt("its %s is page %d, outside the database's %d pages", what, id, w.pages)
	}
	if w.seen[id] {
		return nil, w.corrupt("page %d (%s) is reached twice", id, what)
	}
	w.seen[id] = true
	var hdr [pageHeader]byte
	if _, err := w.f.ReadAt(hdr[:], int64(id)*w.size); err != nil {
		return nil, w.corrupt("page %d: %v", id, err)
	}
	overflow := uint64(binary.NativeEndian.Uint32(hdr[12:]))
	if id+overflow >= w.pages {
		return nil, w.corrupt("page %d (%s) runs %d pages past the database's end", id, what, id+overflow+1-w.pages)
	}
	if got := binary.NativeEndian.Uint64(hdr[:]); got != id {
		return nil, w.corrupt("page %d (%s) says it is page %d", id, what, got)
	}
	// Its overflow pages are its own: none may be reached otherwise.
	for o := id + 1; o <= id+overflow; o++ {
		if w.seen[o] {
			return nil, w.corrupt("page %d is reached twice (in the overflow of page %d)", o, id)
		}
		w.seen[o] = true
	}
	buf := make([]byte, int64(overflow+1)*w.size)
	if _, err := w.f.ReadAt(buf, int64(id)*w.size); err != nil {
		return nil, w.corrupt("page %d: %v", id, err)
	}
	return buf, nil
}

func (w *pageWalk) freelistPage(id uint64) error {
	buf, err := w.read(id, "free list")
	if err != nil {
		return err
	}
	if binary.NativeEndian.Uint16(buf[8:])&freelistPage == 0 {
		return w.corrupt("its free list page %d is not one", id)
	}
	n, first := uint64(binary.NativeEndian.Uint16(buf[10:])), uint64(0)
	if n == freelistCountMax {
		n, first = binary.NativeEndian.Uint64(buf[pageHeader:]), 1
	}
	if n > uint64(len(buf)) || pageHeader+(first+n)*8 > uint64(len(buf)) {
		return w.corrupt("its free list page %d says %d ids, more than it holds", id, n)
	}
	for i := range n {
		w.free = append(w.free, binary.NativeEndian.Uint64(buf[pageHeader+(first+i)*8:]))
	}
	return nil
}

// freeInUse refuses a free list naming a page the tree or the free list
// itself uses (an overflow page among them, which bbolt's check does not
// look at: the next write that frees the page panicked), a meta page, or
// one page twice. An id past the end is left: bbolt drops it.
func (w *pageWalk) freeInUse() error {
	named := make(map[uint64]bool, len(w.free))
	for _, id := range w.free {
		switch {
		case id < 2:
			return w.corrupt("its free list names meta page %d", id)
		case named[id]:
			return w.corrupt("its free list names page %d twice", id)
		case w.seen[id]:
			return w.corrupt("its free list names page %d, which is in use", id)
		}
		named[id] = true
	}
	return nil
}

// tree checks the page id and the pages under it, whose keys lie in
// [lo, hi) (nil: unbounded); it returns the largest key under it.
func (w *pageWalk) tree(id uint64, depth int, lo, hi []byte) ([]byte, error) {
	buf, err := w.read(id, "bucket page")
	if err != nil {
		return nil, err
	}
	return w.node(buf, fmt.Sprintf("page %d", id), depth, lo, hi)
}

// node checks one branch or leaf page held in buf (a page of the file, or
// an inline bucket's page inside a value), as bbolt's own check does: the
// keys in order, within the bounds its parent gives, and the pages under
// it. Any error bbolt's check finds, it reports from a goroutine that
// then faults or dereferences nil (its free list rebuild, for a database
// whose free list is not stored), so every one of them is found here
// first.
func (w *pageWalk) node(buf []byte, where string, depth int, lo, hi []byte) ([]byte, error) {
	if depth > maxTreeDepth {
		return nil, w.corrupt("its buckets nest deeper than %d pages, at %s", maxTreeDepth, where)
	}
	if len(buf) < pageHeader {
		return nil, w.corrupt("%s is shorter than a page header", where)
	}
	flags, count := binary.NativeEndian.Uint16(buf[8:]), uint64(binary.NativeEndian.Uint16(buf[10:]))
	if flags != branchPage && flags != leafPage {
		return nil, w.corrupt("%s is neither a branch nor a leaf page (flags %#x)", where, flags)
	}
	if pageHeader+count*pageElement > uint64(len(buf)) {
		return nil, w.corrupt("%s holds %d elements, more than fit", where, count)
	}
	ne := binary.NativeEndian
	element := func(i uint64) (e []byte, at uint64) {
		at = pageHeader + i*pageElement
		return buf[at : at+pageElement], at
	}
	key := func(i uint64) ([]byte, error) {
		e, at := element(i)
		pos, ksize := uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:]))
		if flags == branchPage {
			pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
		}
		if at+pos+ksize > uint64(len(buf)) {
			return nil, w.corrupt("%s element %d: its key runs past the page", where, i)
		}
		return buf[at+pos : at+pos+ksize], nil
	}
	run := lo
	for i := range count {
		k, err := key(i)
		if err != nil {
			return nil, err
		}
		switch {
		case i == 0 && run != nil && bytes.Compare(run, k) > 0,
			i > 0 && bytes.Compare(run, k) >= 0,
			hi != nil && bytes.Compare(k, hi) >= 0:
			return nil, w.corrupt("%s element %d: its key is out of order", where, i)
		}
		e, at := element(i)
		if flags == branchPage {
			next := hi
			if i+1 < count {
				if next, err = key(i + 1); err != nil {
					return nil, err
				}
			}
			if run, err = w.tree(ne.Uint64(e[8:]), depth+1, k, next); err != nil {
				return nil, err
			}
			continue
		}
		run = k
		eflags, pos := ne.Uint32(e[0:]), uint64(ne.Uint32(e[4:]))
		ksize, vsize := uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		if at+pos+ksize+vsize > uint64(len(buf)) {
			return nil, w.corrupt("%s element %d: its key or value runs past the page", where, i)
		}
		if eflags&bucketLeaf == 0 {
			continue
		}
		v := buf[at+pos+ksize : at+pos+ksize+vsize]
		if len(v) < bucketHeader {
			return nil, w.corrupt("%s element %d: a bucket shorter than its header", where, i)
		}
		if root := ne.Uint64(v); root != 0 {
			_, err = w.tree(root, depth+1, nil, nil)
		} else {
			_, err = w.node(v[bucketHeader:], fmt.Sprintf("%s element %d (inline bucket)", where, i), depth+1, nil, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	return run, nil
}
