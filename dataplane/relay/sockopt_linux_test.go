package relay

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// loopbackPair returns both ends of a fresh TCP connection on loopback.
func loopbackPair(t *testing.T) (ours, theirs *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ours, err = net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err = ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reset(ours); reset(theirs) })
	return ours, theirs
}

// TestEndedByFin tells the three ways a read can end in end of file on
// real sockets: the peer's FIN, a reset whose error a write took first,
// and an orderly close after this side's own FIN (which leaves the same
// state as a reset, hence the wroteFin argument).
func TestEndedByFin(t *testing.T) {
	var notShut, shut atomic.Bool
	shut.Store(true)
	t.Run("peer FIN", func(t *testing.T) {
		ours, theirs := loopbackPair(t)
		_ = theirs.CloseWrite()
		if _, err := ours.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("read: %v, want end of file", err)
		}
		if !endedByFin(ours, &notShut) {
			t.Error("a FIN is not taken for one")
		}
	})
	t.Run("reset taken by a write", func(t *testing.T) {
		ours, theirs := loopbackPair(t)
		reset(theirs)
		var werr error
		testsupport.Eventually(t, 5*time.Second, "a write to see the reset", func() bool {
			_, werr = ours.Write([]byte("x"))
			return werr != nil
		})
		if !errors.Is(werr, syscall.ECONNRESET) {
			t.Fatalf("write: %v, want the reset", werr)
		}
		if _, err := ours.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("read after the write took the error: %v, want end of file", err)
		}
		if endedByFin(ours, &notShut) {
			t.Error("a reset is taken for a FIN")
		}
	})
	t.Run("orderly close after our FIN", func(t *testing.T) {
		ours, theirs := loopbackPair(t)
		_ = ours.CloseWrite()
		if _, err := theirs.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("peer read: %v, want end of file", err)
		}
		_ = theirs.Close()
		if _, err := ours.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("read: %v, want end of file", err)
		}
		if !endedByFin(ours, &shut) {
			t.Error("an orderly close after our own FIN is taken for a reset")
		}
		if peerClosed(ours) {
			t.Log("the state after both FINs is CLOSE_WAIT here; wroteFin is not needed on this kernel")
		}
	})
}
