package sdn_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// Helpers for tests that attack the controller the way a hostile peer
// would: a host that reaches controller.listen, or a switch that
// misbehaves after its handshake.

// dialIn opens a TCP connection inside the switch's namespace from the
// loopback address local, as another host on the controller's network.
func dialIn(t *testing.T, inst *ovstest.Instance, local, remote string) net.Conn {
	t.Helper()
	var conn net.Conn
	err := inst.InNamespace(func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
		var err error
		conn, err = d.Dial("tcp", remote)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func readOF(r io.Reader) (ofp13.Message, error) {
	var hdr [ofp13.HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	h, err := ofp13.ParseHeader(hdr[:])
	if err != nil {
		return nil, err
	}
	buf := make([]byte, h.Length)
	copy(buf, hdr[:])
	if _, err := io.ReadFull(r, buf[ofp13.HeaderLen:]); err != nil {
		return nil, err
	}
	return ofp13.Unmarshal(buf)
}

func writeOF(w io.Writer, m ofp13.Message) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// claimDatapath is the switch side of the OpenFlow handshake: hello, then
// a features reply naming dpid. It returns what the controller sent.
func claimDatapath(conn net.Conn, dpid uint64) ([]ofp13.Type, error) {
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	defer conn.SetDeadline(time.Time{})
	if err := writeOF(conn, ofp13.NewHello(ofp13.Version)); err != nil {
		return nil, err
	}
	var got []ofp13.Type
	for {
		m, err := readOF(conn)
		if err != nil {
			return got, err
		}
		got = append(got, m.MessageType())
		if fr, ok := m.(*ofp13.FeaturesRequest); ok {
			return got, writeOF(conn, &ofp13.FeaturesReply{XID: fr.XID, DatapathID: dpid, NTables: 254})
		}
	}
}

// untilHangUp reads until the controller closes the connection and
// returns the types of the messages it sent; the test fails if the
// controller keeps it open for a minute.
func untilHangUp(t *testing.T, conn net.Conn) []ofp13.Type {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var got []ofp13.Type
	for {
		m, err := readOF(conn)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the controller kept the connection open for a minute; it sent %v", got)
			}
			return got
		}
		got = append(got, m.MessageType())
	}
}

// requireNoPolicy fails if the controller sent anything that reads or
// writes flows: a refused peer learns nothing of the steering policy.
func requireNoPolicy(t *testing.T, who string, got []ofp13.Type) {
	t.Helper()
	for _, typ := range got {
		if typ == ofp13.TypeFlowMod || typ == ofp13.TypeMultipartRequest || typ == ofp13.TypeBarrierRequest {
			t.Fatalf("%s received %s (all: %v)", who, typ, got)
		}
	}
}

// peak samples the goroutines and the heap of the test process, where the
// controller runs. A test may sample from a goroutine of its own while it
// writes (mu).
type peak struct {
	mu                            sync.Mutex
	baseGoroutines, maxGoroutines int
	baseHeap, maxHeap             uint64
}

func newPeak() *peak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	n := runtime.NumGoroutine()
	return &peak{baseGoroutines: n, maxGoroutines: n, baseHeap: ms.HeapAlloc, maxHeap: ms.HeapAlloc}
}

func (p *peak) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maxGoroutines = max(p.maxGoroutines, runtime.NumGoroutine())
	p.maxHeap = max(p.maxHeap, ms.HeapAlloc)
}

// requireBelow fails when the peaks grew by more than the bounds, set
// generously: the unbounded behaviour they guard against grows by
// thousands of goroutines and hundreds of megabytes.
func (p *peak) requireBelow(t *testing.T, goroutines int, heap uint64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("goroutines %d -> peak %d; heap %.1f MiB -> peak %.1f MiB",
		p.baseGoroutines, p.maxGoroutines, float64(p.baseHeap)/(1<<20), float64(p.maxHeap)/(1<<20))
	if p.maxGoroutines > p.baseGoroutines+goroutines {
		t.Errorf("goroutines grew from %d to %d (bound +%d)", p.baseGoroutines, p.maxGoroutines, goroutines)
	}
	if p.maxHeap > p.baseHeap+heap {
		t.Errorf("heap grew from %d to %d bytes (bound +%d)", p.baseHeap, p.maxHeap, heap)
	}
}

// refusedWith counts the controller's recent refusals whose reason has sub.
func refusedWith(c *sdn.Controller, sub string) int {
	n := 0
	for _, r := range c.Status().Refused {
		if strings.Contains(r.Reason, sub) {
			n++
		}
	}
	return n
}

// requireRepairs wipes the bridge's flow table and waits for the
// controller's drift repair to put the owned flows back: proof that the
// session of the real switch still works.
func requireRepairs(t *testing.T, br *ovstest.Bridge, desired []flows.Flow) {
	t.Helper()
	if _, err := br.Ofctl("del-flows"); err != nil {
		t.Fatal(err)
	}
	want := compiledTexts(t, desired)
	testsupport.Eventually(t, 30*time.Second, "drift repair to restore the flows of "+br.Name, func() bool {
		got, _ := ownedOnSwitch(t, br)
		return slices.Equal(got, want)
	})
}
