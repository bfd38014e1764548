package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"golang.org/x/sys/unix"
)

// TestResetAsTheFinalACKGoesIsALostStream: the server side completes
// first (its end host closed first, so the client side had acknowledged
// its FIN when the client's FIN arrived), and the one stream that would
// carry its final ACK is reset just then, the reset's error taken by a
// write of that stream's writer. The reader then sees only an end of
// file. It is a lost stream, not the client side's end: the server side
// keeps the session, the client side's replacement joins it and gets the
// final ACK, and both complete. Before, the server side took the end of
// file for the client side's half-close and ended the session; the
// replacement was refused as an unknown session and the client side
// aborted the session with every byte through both ways.
func TestResetAsTheFinalACKGoesIsALostStream(t *testing.T) {
	for _, enc := range []string{EncryptionAESGCM, EncryptionNone} {
		t.Run(enc, func(t *testing.T) { finalACKReset(t, enc, false, false) })
	}
}

// TestResetAsTheClientSidesFinalACKGoes: the mirror, the client side
// complete first (its client sent all and half-closed before the server
// answered) and its final ACK's stream reset as it goes. The client side
// replaces the stream, the replacement carries the ACK again, and both
// complete.
func TestResetAsTheClientSidesFinalACKGoes(t *testing.T) {
	finalACKReset(t, EncryptionAESGCM, false, true)
}

// TestDrainLetsAFinishingSessionReplaceAStream: the same while the
// server-side agent is shutting down (Shutdown lets live sessions finish;
// it starts after the response went, the request still to come). The
// session, complete at the server side, lingers there for the
// replacement that carries the final ACK again; the draining agent takes
// that JOIN (it refuses new sessions only), and both sides complete.
// Found by review: Shutdown closed the data listener at once, so the
// replacement was refused until the client side's reconnect timeout
// aborted the session and reset its client, every byte through both ways
// and the server side counting it completed.
func TestDrainLetsAFinishingSessionReplaceAStream(t *testing.T) {
	finalACKReset(t, EncryptionAESGCM, true, false)
}

// finalACKReset runs attempts of the final-ACK reset until one mounts
// it: a hook, in the server side's writer as it starts the stream's end,
// resets the client side's end of the stream, waits without yielding
// until the reset has arrived, and takes its error (SO_ERROR) as a write
// would; with GOMAXPROCS 1 the reader, woken by the reset, cannot run
// first. An attempt counts only when the client side was not complete at
// the hook (it has not read the final ACK, which the reset then
// discards). drain shuts the server side down between the response and
// the request. clientFirst mounts it at the client side instead: the
// client sends its request and half-closes first, then the server
// answers, so the client side completes first.
func finalACKReset(t *testing.T, enc string, drain, clientFirst bool) {
	for attempt := range 12 {
		if finalACKResetAttempt(t, enc, drain, clientFirst) {
			return
		}
		t.Logf("attempt %d: the client side had read the final ACK, or the reset's error was not taken; again", attempt)
	}
	t.Fatal("the final-ACK reset never mounted: the test did not test its case")
}

// resetTakenByWrite resets peer, the far end of conn, waits without
// yielding (5 ms at most) until the reset has reached conn, and takes its
// error (SO_ERROR) as a write on conn would: conn's reader then reads only
// end of file. It reports whether it took the reset's error. The caller
// runs with GOMAXPROCS 1, so conn's reader, woken by the reset, cannot
// take it first.
func resetTakenByWrite(peer, conn *net.TCPConn) bool {
	reset(peer)
	for deadline := time.Now().Add(5 * time.Millisecond); time.Now().Before(deadline); {
		if info, ok := readTCPInfo(conn); ok && info.state != tcpEstablished {
			return errors.Is(socketError(conn), unix.ECONNRESET)
		}
	}
	return false
}

func finalACKResetAttempt(t *testing.T, enc string, drain, clientFirst bool) (mounted bool) {
	response := patterned(256<<10, 3)
	request := patterned(64<<10, 4)
	gotRequest := make(chan []byte, 1)
	serve := func(c *net.TCPConn) {
		defer c.Close()
		_, _ = c.Write(response)
		_ = c.CloseWrite()
		b, _ := io.ReadAll(c)
		gotRequest <- b
	}
	if clientFirst {
		serve = func(c *net.TCPConn) {
			defer c.Close()
			b, _ := io.ReadAll(c)
			gotRequest <- b
			_, _ = c.Write(response)
			_ = c.CloseWrite()
		}
	}
	p := startPair(t, pairOptions{streams: 1, chunk: 16384, encryption: enc,
		limitsA: Limits{ReconnectTimeout: 2 * time.Second},
		limitsB: Limits{ReconnectTimeout: 4 * time.Second},
	}, serve)
	// first completes first; its writer's hook resets other's end.
	first, other := p.b, p.a
	if clientFirst {
		first, other = p.a, p.b
	}
	var ran, void, took atomic.Bool
	hook := func(stream int, conn *net.TCPConn) {
		if !ran.CompareAndSwap(false, true) {
			return
		}
		// The other side's end of the stream.
		var peer *net.TCPConn
		other.mu.Lock()
		for s := range other.sessions {
			s.mu.Lock()
			if st := s.streams[stream]; st != nil {
				peer = st.conn
			}
			s.mu.Unlock()
			if s.isCompleted() {
				void.Store(true)
			}
		}
		other.mu.Unlock()
		if peer == nil || void.Load() {
			void.Store(true)
			return
		}
		took.Store(resetTakenByWrite(peer, conn))
	}
	first.testFinishWrite.Store(&hook)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if clientFirst {
		if _, err := c.Write(request); err != nil {
			t.Fatal(err)
		}
		_ = c.CloseWrite()
	}
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, response) {
		t.Fatalf("the response: %d of %d bytes, err %v", len(got), len(response), err)
	}
	shutdown := make(chan error, 1)
	if drain {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			shutdown <- p.b.Shutdown(ctx)
		}()
		awaitDraining(t, p.b)
	}
	if !clientFirst {
		if _, err := c.Write(request); err != nil {
			t.Fatal(err)
		}
		_ = c.CloseWrite()
	}
	select {
	case b := <-gotRequest:
		if !bytes.Equal(b, request) {
			t.Fatalf("the server got %d of %d request bytes", len(b), len(request))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server never got the request's end")
	}
	testsupport.Eventually(t, 20*time.Second, "the session ended on both sides", func() bool {
		ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
		return ta.SessionsCompleted+ta.SessionsAborted == 1 && tb.SessionsCompleted+tb.SessionsAborted == 1
	})
	var serr error
	if drain {
		serr = <-shutdown
	}
	if void.Load() || !took.Load() {
		return false
	}
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("client side: %d completed, %d aborted, %d streams replaced; server side: %d completed, %d aborted, %d streams lost; shutdown: %v",
		ta.SessionsCompleted, ta.SessionsAborted, ta.StreamsReplaced, tb.SessionsCompleted, tb.SessionsAborted, tb.StreamsLost, serr)
	if ta.SessionsCompleted != 1 || tb.SessionsCompleted != 1 {
		t.Errorf("completed: client side %d, server side %d; want the session complete on both", ta.SessionsCompleted, tb.SessionsCompleted)
	}
	if ta.StreamsReplaced != 1 {
		t.Errorf("the client side replaced %d streams, want the reset one", ta.StreamsReplaced)
	}
	if serr != nil {
		t.Errorf("the drain: %v", serr)
	}
	return true
}
