package relay

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestAutoStreamsAfterOneDirectionEnded: under streams = "auto" the
// choice goes on after one direction ended. Here the server greets and
// half-closes at once, and then the client uploads on paced streams: the
// choice measures the upload and doubles the count (or keeps it, on a
// machine too loaded to carry more), as it does for a session with both
// directions open. Before, the server's half-close ended the choice: the
// count stayed at the first streams for the whole upload, and status
// said "joining" or "measuring" all along (found by review).
func TestAutoStreamsAfterOneDirectionEnded(t *testing.T) {
	const max = 32
	received := make(chan int64, 1)
	p := startPair(t, pairOptions{streams: max, queue: -1, autoStreams: true}, func(c *net.TCPConn) {
		defer c.Close()
		_, _ = c.Write([]byte("hello\n"))
		_ = c.CloseWrite()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	})
	paceStreams(p.a, 2<<20)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(120 * time.Second))
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello\n" {
		t.Fatalf("the greeting: %q, %v", b, err)
	}
	piece := patternBytes(4<<20, 5)
	var sent int64
	var s *SessionStats
	verdict := false
	for range 48 {
		if _, err := c.Write(piece); err != nil {
			t.Fatal(err)
		}
		sent += int64(len(piece))
		if s = onlySession(p.a); s == nil {
			t.Fatal("the auto session is gone")
		}
		if s.StreamsChosen > autoFirstStreams || s.AutoState == AutoKept {
			verdict = true
			break
		}
	}
	t.Logf("after %d MiB uploaded: %d/%d (auto, max %d; %s)", sent>>20, s.StreamsLive, s.StreamsChosen, s.Streams, s.AutoState)
	if !verdict {
		t.Errorf("the choice never came to a verdict after the server's half-close: %d of %d streams, %q", s.StreamsChosen, max, s.AutoState)
	}
	_ = c.CloseWrite()
	select {
	case n := <-received:
		if n != sent {
			t.Fatalf("the server received %d of %d bytes", n, sent)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the upload never ended at the server")
	}
	requireClean(t, p, 1)
}
