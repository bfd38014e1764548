// Package connlimit bounds how many connections a listener keeps open at
// once, in all and from one source address.
//
// It is for the small HTTP servers a node runs beside its data path (the
// agent's health endpoint, the daemon's metrics): each accepted connection
// costs a goroutine, buffers and a file descriptor until its timeouts end
// it, so without a cap anyone who reaches the port can hold as many as the
// process may open files, and the relay's own listeners then fail to
// accept. Past a cap an old connection is closed, not the new one: the
// controller's or Prometheus's request is the newest on the port, while a
// flood of silent connections only evicts itself. Connections that have
// been answered (a client's keep-alive connection) go last.
package connlimit

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that keeps at most Total connections open,
// at most PerSource of them from one address. Closing an accepted
// connection (as http.Server does at its timeouts) frees its place.
type Listener struct {
	net.Listener
	total, perSource int

	mu    sync.Mutex
	order *list.List // of *conn, oldest first
	bySrc map[netip.Addr]int

	evicted atomic.Uint64
}

// New wraps ln. total and perSource must be positive.
func New(ln net.Listener, total, perSource int) *Listener {
	return &Listener{
		Listener: ln, total: max(total, 1), perSource: max(perSource, 1),
		order: list.New(), bySrc: map[netip.Addr]int{},
	}
}

// Accept accepts a connection and makes room for it: past the source's
// cap one of the source's connections is closed, past the total cap one
// of any source; the oldest that has never been answered, else the
// oldest of the source that holds the most.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	src := sourceOf(c)
	tc := &conn{Conn: c, l: l, src: src}
	l.mu.Lock()
	var victim *conn
	switch {
	case l.bySrc[src] >= l.perSource:
		victim = l.oldestLocked(func(c *conn) bool { return c.src == src && !c.answered.Load() })
		if victim == nil {
			victim = l.oldestLocked(func(c *conn) bool { return c.src == src })
		}
	case l.order.Len() >= l.total:
		victim = l.oldestLocked(func(c *conn) bool { return !c.answered.Load() })
		if victim == nil {
			busiest := l.busiestLocked()
			victim = l.oldestLocked(func(c *conn) bool { return c.src == busiest })
		}
	}
	if victim != nil {
		l.removeLocked(victim)
	}
	tc.elem = l.order.PushBack(tc)
	l.bySrc[src]++
	l.mu.Unlock()
	if victim != nil {
		l.evicted.Add(1)
		_ = victim.Conn.Close()
	}
	return tc, nil
}

// Open is how many accepted connections are open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// Evicted is how many connections were closed to make room.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// oldestLocked is the oldest connection that match accepts.
func (l *Listener) oldestLocked(match func(*conn) bool) *conn {
	for e := l.order.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*conn); match(c) {
			return c
		}
	}
	return nil
}

// busiestLocked is the source holding the most connections (of those
// tied, the one whose oldest connection is oldest).
func (l *Listener) busiestLocked() netip.Addr {
	var best netip.Addr
	n := 0
	for e := l.order.Front(); e != nil; e = e.Next() {
		c := e.Value.(*conn)
		if k := l.bySrc[c.src]; k > n {
			best, n = c.src, k
		}
	}
	return best
}

// removeLocked forgets c; it is a no-op for one already forgotten.
func (l *Listener) removeLocked(c *conn) {
	if c.elem == nil {
		return
	}
	l.order.Remove(c.elem)
	c.elem = nil
	if l.bySrc[c.src]--; l.bySrc[c.src] <= 0 {
		delete(l.bySrc, c.src)
	}
}

func sourceOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// conn is an accepted connection that gives its place back when closed.
type conn struct {
	net.Conn
	l    *Listener
	src  netip.Addr
	elem *list.Element // nil once forgotten
	// answered: the server has written to it, so it sent a whole
	// request (net/http answers nothing before that).
	answered atomic.Bool
}

func (c *conn) Write(p []byte) (int, error) {
	c.answered.Store(true)
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one after an error answer.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
