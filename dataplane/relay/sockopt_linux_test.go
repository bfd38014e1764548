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

// TestFinBefore checks on real sockets what finBefore relies on: a FIN
// acknowledges everything its sender had received (a peer that read the
// bytes and closed: finBefore false for them), and bytes written after a
// peer closed its socket are answered with a reset, never acknowledged
// (finBefore true until the reset; the bytes stay unacknowledged). It
// also checks bytesTaken's count of written bytes.
func TestFinBefore(t *testing.T) {
	t.Run("read then closed", func(t *testing.T) {
		ours, theirs := loopbackPair(t)
		// The count starts at 1: tcpi_bytes_acked counts the SYN.
		start, ok := bytesTaken(ours)
		if !ok || start != 1 {
			t.Fatalf("bytesTaken of a fresh connection: %d, %v; want 1 (the SYN)", start, ok)
		}
		if _, err := ours.Write(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		if n, ok := bytesTaken(ours); !ok || n != start+100 {
			t.Fatalf("bytesTaken after 100 bytes written: %d, %v; want %d", n, ok, start+100)
		}
		if _, err := io.ReadFull(theirs, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		_ = theirs.Close()
		testsupport.Eventually(t, 10*time.Second, "the peer's FIN", func() bool { return peerClosed(ours) })
		if finBefore(ours, start+100) {
			t.Error("finBefore(the 100 bytes) after the peer read them and closed: true, want false")
		}
		if !finBefore(ours, start+101) {
			t.Error("finBefore(one byte more) after the peer read 100 bytes and closed: false, want true")
		}
	})
	t.Run("closed then written", func(t *testing.T) {
		ours, theirs := loopbackPair(t)
		_ = theirs.Close()
		testsupport.Eventually(t, 10*time.Second, "the peer's FIN", func() bool { return peerClosed(ours) })
		taken, ok := bytesTaken(ours)
		if !ok {
			t.Fatal("bytesTaken: no answer")
		}
		if !finBefore(ours, taken+50) {
			t.Error("finBefore before the write: false, want true")
		}
		if _, err := ours.Write(make([]byte, 50)); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 10*time.Second, "the closed socket's reset", func() bool { return !peerClosed(ours) })
		if info, ok := readTCPInfo(ours); !ok || info.bytesAcked != taken {
			t.Errorf("bytes acknowledged after writing to a closed socket: %d (ok %v), want %d", info.bytesAcked, ok, taken)
		}
		if finBefore(ours, taken+50) {
			t.Error("finBefore after the reset: true, want false (a reset is not a FIN)")
		}
	})
}
