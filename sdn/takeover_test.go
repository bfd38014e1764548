package sdn_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// pacedReader reads at most n bytes every interval.
type pacedReader struct {
	r        io.Reader
	n, left  int
	interval time.Duration
	total    atomic.Int64
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		time.Sleep(p.interval)
		p.left = p.n
	}
	n, err := p.r.Read(b[:min(len(b), p.left)])
	p.left -= n
	p.total.Add(int64(n))
	return n, err
}

// liveSwitch is the switch side of a session that answers every echo
// request (unless slowEchoes) and barrier, sends its own echo requests
// every 300 ms, and notes when the controller hangs up; it reads through
// r.
type liveSwitch struct {
	conn   net.Conn
	wmu    sync.Mutex
	closed atomic.Bool
	stop   chan struct{}
	// slowEchoes leaves the controller's echo requests unanswered, as a
	// switch does while it works through what came before them.
	slowEchoes bool
}

func (p *liveSwitch) write(m ofp13.Message) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return writeOF(p.conn, m)
}

func (p *liveSwitch) run(r io.Reader) {
	go func() {
		for {
			m, err := readOF(r)
			if err != nil {
				p.closed.Store(true)
				return
			}
			switch m := m.(type) {
			case *ofp13.EchoRequest:
				if !p.slowEchoes {
					_ = p.write(&ofp13.EchoReply{XID: m.XID, Data: m.Data})
				}
			case *ofp13.BarrierRequest:
				_ = p.write(&ofp13.BarrierReply{XID: m.XID})
			}
		}
	}()
	go func() {
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tk.C:
				if p.closed.Load() || p.write(&ofp13.EchoRequest{XID: 0x4242}) != nil {
					return
				}
			}
		}
	}()
}

// TestImpostorRefusedDuringALongConvergence: "a second connection
// claiming a connected datapath id is refused ...; the live session is
// kept". The connected switch answers every echo and barrier and keeps its
// link alive, and is in a convergence of 140,000 deletes (stale owned
// flows, as a shrunk configuration leaves them) that it reads at 200 KB/s;
// an impostor claims its datapath id meanwhile. Before, claim's echo went
// with the session's writer, which the convergence held for as long as
// all its flow mods took to go out: claim's wait ended before the echo
// even left, and the switch was taken for dead and cut off. Now the flow
// mods go in batches sized to the switch's pace, each followed by a
// barrier, the echo goes between them, and a switch that reads what was
// sent counts as alive (progressSince). Found by review (helper-53).
func TestImpostorRefusedDuringALongConvergence(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The default keepalive, 5 s.
	ctl := startController(t, sdn.Config{Listener: ln, ResyncInterval: -1, Switches: []flows.Switch{hostileSwitch}})
	stop := make(chan struct{})
	defer close(stop)

	// The switch: its session, a flow dump with 140,000 stale owned flows.
	real := &liveSwitch{conn: declaredSession(t, ctl, ln.Addr().String(), hostileSwitch), stop: stop}
	since := switchStatus(ctl.Controller, hostileSwitch.Name).ConnectedSince
	dump := readUntil(t, real.conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeMultipartRequest })
	if err := real.conn.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	const stale = 140000
	for _, part := range staleDump(dump.TransactionID(), stale) {
		if err := real.write(part); err != nil {
			t.Fatal(err)
		}
	}
	paced := &pacedReader{r: real.conn, n: 50 << 10, interval: 250 * time.Millisecond}
	real.run(paced)
	// Wait until the convergence writes its deletes.
	testsupport.Eventually(t, 30*time.Second, "the deletes to flow", func() bool { return paced.total.Load() > 200<<10 })
	if !switchStatus(ctl.Controller, hostileSwitch.Name).Connected || real.closed.Load() {
		t.Fatal("the switch lost its session before the impostor came")
	}

	// The impostor claims the connected switch's datapath id.
	ic, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	if _, err := claimDatapath(ic, hostileSwitch.DatapathID); err != nil {
		t.Fatal(err)
	}
	impostor := &liveSwitch{conn: ic, stop: stop}
	impostor.run(ic)
	if !testsupport.Poll(60*time.Second, func() bool { return real.closed.Load() || impostor.closed.Load() }) {
		t.Fatal("neither connection was closed within 60 s")
	}
	time.Sleep(500 * time.Millisecond)
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	t.Logf("switch closed: %v, impostor closed: %v; session: connected %v from %s since %v (switch's from %s since %v)",
		real.closed.Load(), impostor.closed.Load(), st.Connected, st.Remote, st.ConnectedSince.Format("15:04:05.000"),
		real.conn.LocalAddr(), since.Format("15:04:05.000"))
	if st.Remote == ic.LocalAddr().String() || real.closed.Load() {
		t.Errorf("the impostor took over the connected switch's session (switch connection closed: %v, session now from %s)",
			real.closed.Load(), st.Remote)
	}
}

// TestImpostorRefusedWhileTheSwitchTalks: the connected switch sends its
// own echo requests, and answers barriers, but the answer to the echo a
// claim sends it comes later than the keepalive (it works through what
// came before it). Before, the claim took it for silent and gave its
// session to the impostor; now a switch heard from since the echo went
// counts as alive (heardSince).
func TestImpostorRefusedWhileTheSwitchTalks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, ResyncInterval: -1,
		Switches: []flows.Switch{hostileSwitch}})
	stop := make(chan struct{})
	defer close(stop)
	real := &liveSwitch{conn: declaredSession(t, ctl, ln.Addr().String(), hostileSwitch), stop: stop, slowEchoes: true}
	dump := readUntil(t, real.conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeMultipartRequest })
	if err := real.conn.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := real.write(&ofp13.FlowStatsReply{XID: dump.TransactionID()}); err != nil {
		t.Fatal(err)
	}
	real.run(real.conn)

	ic, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	if _, err := claimDatapath(ic, hostileSwitch.DatapathID); err != nil {
		t.Fatal(err)
	}
	impostor := &liveSwitch{conn: ic, stop: stop}
	impostor.run(ic)
	if !testsupport.Poll(20*time.Second, func() bool { return real.closed.Load() || impostor.closed.Load() }) {
		t.Fatal("neither connection was closed within 20 s")
	}
	st := switchStatus(ctl.Controller, hostileSwitch.Name)
	t.Logf("switch closed: %v, impostor closed: %v; session from %s", real.closed.Load(), impostor.closed.Load(), st.Remote)
	if real.closed.Load() || st.Remote != real.conn.LocalAddr().String() {
		t.Errorf("the impostor took over the session of a switch that kept talking (switch connection closed: %v, session now from %s)",
			real.closed.Load(), st.Remote)
	}
}
