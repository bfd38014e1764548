package relay

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestBytesTakenCountsUnsentBytes: bytesTaken's SIOCOUTQ counts
// bytes the socket holds unsent (the peer's window closed), not only
// those sent and unacknowledged: the count is every byte written, plus
// the SYN, whatever was acknowledged. Written by review (helper-55).
func TestBytesTakenCountsUnsentBytes(t *testing.T) {
	ours, theirs := loopbackPair(t)
	_ = theirs.SetReadBuffer(4096)
	start, ok := bytesTaken(ours)
	if !ok {
		t.Fatal("bytesTaken: no answer")
	}
	_ = ours.SetWriteDeadline(time.Now().Add(2 * time.Second))
	n, err := ours.Write(make([]byte, 16<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that reads nothing: %d, %v; want a deadline", n, err)
	}
	info, _ := readTCPInfo(ours)
	taken, ok := bytesTaken(ours)
	t.Logf("written %d, acknowledged %d (count from %d), bytesTaken %d", n, info.bytesAcked, start, taken)
	if info.bytesAcked >= start+uint64(n) {
		t.Fatal("everything written was acknowledged: the case was not mounted")
	}
	if !ok || taken != start+uint64(n) {
		t.Errorf("bytesTaken with bytes unsent: %d, want %d", taken, start+uint64(n))
	}
}

// TestFinCarriesDelayedAck: a peer in delayed-ACK mode that reads
// the bytes and closes at once acknowledges them with its FIN: finBefore
// is false for them. Written by review (helper-55).
func TestFinCarriesDelayedAck(t *testing.T) {
	for range 20 {
		ours, theirs := loopbackPair(t)
		start, _ := bytesTaken(ours)
		rc, _ := theirs.SyscallConn()
		_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 0) })
		if _, err := ours.Write(make([]byte, 300)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(theirs, make([]byte, 300)); err != nil {
			t.Fatal(err)
		}
		_ = theirs.Close()
		testsupport.Eventually(t, 10*time.Second, "the peer's FIN", func() bool { return peerClosed(ours) })
		if finBefore(ours, start+300) {
			info, _ := readTCPInfo(ours)
			t.Fatalf("finBefore true after the peer read the bytes and closed (acked %d, want %d)", info.bytesAcked, start+300)
		}
	}
}
