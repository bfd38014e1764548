package relay

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestPeerEndedRacesTheOwnHalfClose: the peer half-closed cleanly (the
// stream is in CLOSE_WAIT, the reader got end of file) while this side's
// writer starts its own half-close. peerEnded must take it for the
// peer's end whenever that half-close lands. Found by review: it read
// fin first and the TCP state second, and a CloseWrite landing between
// the two moved the state out of CLOSE_WAIT (LAST_ACK, then CLOSE), so
// the clean end counted as a lost stream (3-5 times in 20,000 rounds).
func TestPeerEndedRacesTheOwnHalfClose(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	falses := 0
	const rounds = 20000
	for i := range rounds {
		var peer *net.TCPConn
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer, _ = ln.AcceptTCP()
		}()
		c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		_ = peer.CloseWrite() // the peer's FIN
		for deadline := time.Now().Add(time.Second); !peerClosed(c) && time.Now().Before(deadline); {
		}
		st := &stream{conn: c}
		start := make(chan struct{})
		done := make(chan struct{})
		go func() { // the writer's finishWrite, minus the ACK
			defer close(done)
			<-start
			for range i % 64 {
				runtime.Gosched()
			}
			st.fin.Store(finClosing)
			if err := c.CloseWrite(); err != nil {
				st.fin.Store(finFailed)
				return
			}
			st.fin.Store(finClosed)
		}()
		close(start)
		if !st.peerEnded() {
			falses++
		}
		<-done
		c.Close()
		peer.Close()
	}
	if falses > 0 {
		t.Errorf("peerEnded said a clean end (peer's FIN, then our half-close) was not the peer's end %d times of %d", falses, rounds)
	}
}
