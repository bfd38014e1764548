package connlimit

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// recordingConn is a net.Conn with a remote address that records Close.
type recordingConn struct {
	net.Conn
	remote net.Addr
	closed atomic.Bool
}

func (c *recordingConn) RemoteAddr() net.Addr { return c.remote }
func (c *recordingConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 80}
}
func (c *recordingConn) Close() error { c.closed.Store(true); return nil }

// TestAllowRacesAdmit: a connection accepted while Allow narrows the list
// is either refused at accept or closed by Allow, never left open after
// Allow returns. Found by review: admit read the list before it took l.mu
// and Allow stored it before, so an accept that read the old list could
// add a connection Allow had already swept (12 of 20 tries here).
//
// The test holds l.mu to stand for "admit between reading the list and
// locking" and lets Allow take the mutex first.
func TestAllowRacesAdmit(t *testing.T) {
	const tries = 20
	leaked := 0
	for range tries {
		l := New(nil, 16, 8)
		c := &recordingConn{remote: &net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}}
		l.mu.Lock()
		got := make(chan *conn, 1)
		go func() { owner, _ := l.ownerAtAccept(c); got <- l.admit(c, owner) }()
		time.Sleep(20 * time.Millisecond) // admit has read the (empty) list and waits for l.mu
		l.mu.Unlock()
		l.Allow([]netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")})
		tc := <-got
		if tc != nil && !c.closed.Load() && l.Open() == 1 {
			leaked++
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d tries: a connection from 192.0.2.9 is open and served after Allow([192.0.2.1/32]) returned", leaked, tries)
	}
}

// The same race without touching l.mu: admit and Allow run concurrently on
// fresh listeners; a connection from outside the narrowed list still open
// after both returned is a leak (2 in 200,000 before the fix).
func TestAllowRacesAdmitStress(t *testing.T) {
	leaked := 0
	const tries = 200000
	narrow := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}
	for range tries {
		l := New(nil, 16, 8)
		c := &recordingConn{remote: &net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}}
		done := make(chan struct{})
		go func() { owner, _ := l.ownerAtAccept(c); l.admit(c, owner); close(done) }()
		l.Allow(narrow)
		<-done
		if !c.closed.Load() && l.Open() == 1 {
			leaked++
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d concurrent admit/Allow pairs left a connection from outside the list open", leaked, tries)
	}
}
