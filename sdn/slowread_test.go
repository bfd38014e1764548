package sdn_test

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestSlowReaderConvergenceHeedsItsDeadline: ConvergeTimeout "bounds one
// dump-diff-apply-barrier". Before, Apply wrote its flow mods without
// looking at the context: each 64 KiB batch only had to get out within
// the write timeout (10 s). A declared switch reports 140,000 stale owned
// flows (7.8 MB, within FlowReplyLimit) and reads the deletes that follow
// at 200 KB/s, sending echoes so that the link looks alive: the
// convergence, bounded at 3 s, was still running 20 s later, and
// Controller.Run, cancelled then, waited for the remaining batches. Now
// Apply looks at the context between batches. Found by review (helper-53).
func TestSlowReaderConvergenceHeedsItsDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, ResyncInterval: -1,
		ConvergeTimeout: 3 * time.Second, Switches: []flows.Switch{hostileSwitch}})
	// A small receive buffer keeps the kernel from absorbing the deletes.
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := claimDatapath(conn, hostileSwitch.DatapathID); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the switch's session", func() bool {
		return switchStatus(ctl.Controller, hostileSwitch.Name).Connected
	})
	dump := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeMultipartRequest })
	const stale = 140000
	var buf []byte
	for _, part := range staleDump(dump.TransactionID(), stale) {
		if buf, err = part.AppendBinary(buf[:0]); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	// Read 50 KiB every 250 ms (enough to drain a third of a 4 MiB send
	// buffer within each 10 s write timeout); echo every 300 ms.
	var read atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		chunk := make([]byte, 50<<10)
		for ctx.Err() == nil {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			for got := 0; got < len(chunk); {
				n, err := conn.Read(chunk[got:])
				got += n
				read.Add(int64(n))
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						break
					}
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	go func() {
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				if writeOF(conn, &ofp13.EchoRequest{XID: 0x1234}) != nil {
					return
				}
			}
		}
	}()
	sent := time.Now()
	ended := testsupport.Poll(20*time.Second, func() bool {
		st := switchStatus(ctl.Controller, hostileSwitch.Name)
		return st.Converges > 0 || !st.Connected
	})
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	t.Logf("%v after the dump: connected %v, converges %d, last error %q; %d bytes of flow mods read",
		time.Since(sent).Round(time.Millisecond), st.Connected, st.Converges, st.LastError, read.Load())
	if !ended {
		t.Errorf("a convergence bounded by ConvergeTimeout (3 s) is still running 20 s after the switch sent its flow dump")
	}
	stopped := make(chan struct{})
	start := time.Now()
	go func() { ctl.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Logf("Run returned %v after cancel", time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Errorf("Controller.Run has not returned 20 s after its context was cancelled: one switch reading its flow mods slowly holds it (%d bytes read so far)",
			read.Load())
		cancel()
		conn.Close()
		<-stopped
		t.Logf("Run returned once the switch hung up, %v after cancel", time.Since(start).Round(time.Millisecond))
	}
}
