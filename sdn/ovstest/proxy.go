package ovstest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// Event is one message a RecordingProxy saw.
type Event struct {
	At  time.Time
	Ctl string
	// Conn numbers the connections of one front, so two switches behind
	// it are told apart.
	Conn int
	Kind string // "flow_mod", or "role" for a role reply or role status
	Role ofp13.ControllerRole
}

// RecordingProxy sits between a switch and the controllers: it forwards every
// message and records, per controller, the flow mods it sent and the roles
// the switch granted it, so a test can check from the wire (not from the
// controllers' own counters) that only the switch's master sent flow mods.
type RecordingProxy struct {
	mu     sync.Mutex
	events []Event
}

// Front listens where the switch connects for controller ctl (the target
// it returns) and forwards to backend, the "127.0.0.1:PORT" in the
// instance's namespace the controller serves on. Its connections close when the test ends.
func (p *RecordingProxy) Front(t testing.TB, inst *Instance, ctl, backend string) string {
	t.Helper()
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			sw, err := ln.Accept()
			if err != nil {
				return
			}
			var c net.Conn
			err = inst.InNamespace(func() (err error) {
				c, err = net.DialTimeout("tcp", backend, 5*time.Second)
				return err
			})
			if err != nil {
				sw.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, sw, c)
			id := len(conns)
			mu.Unlock()
			wg.Go(func() { p.pump(ctl, id, sw, c, false) })
			wg.Go(func() { p.pump(ctl, id, c, sw, true) })
		}
	})
	return "tcp:" + ln.Addr().String()
}

func (p *RecordingProxy) pump(ctl string, conn int, from, to net.Conn, fromController bool) {
	defer from.Close()
	defer to.Close()
	rd := bufio.NewReader(from)
	for {
		hdr, err := rd.Peek(8)
		if err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(hdr[2:4]))
		if len(msg) < 8 {
			return
		}
		if _, err := io.ReadFull(rd, msg); err != nil {
			return
		}
		ev := Event{At: time.Now(), Ctl: ctl, Conn: conn}
		if m, err := ofp13.Unmarshal(msg); err == nil {
			switch m := m.(type) {
			case *ofp13.FlowMod:
				if fromController {
					ev.Kind = "flow_mod"
				}
			case *ofp13.RoleReply:
				if !fromController {
					ev.Kind, ev.Role = "role", m.Role
				}
			case *ofp13.RoleStatus:
				if !fromController {
					ev.Kind, ev.Role = "role", m.Role
				}
			}
		}
		if ev.Kind != "" {
			p.mu.Lock()
			p.events = append(p.events, ev)
			p.mu.Unlock()
		}
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}

// FlowMods counts the flow mods ctl sent since the index mark.
func (p *RecordingProxy) FlowMods(ctl string, mark int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.events[mark:] {
		if e.Ctl == ctl && e.Kind == "flow_mod" {
			n++
		}
	}
	return n
}

func (p *RecordingProxy) Mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// CheckOnlyMaster fails the test for any flow mod a controller sent while
// the switch's last word to it was not "master".
func (p *RecordingProxy) CheckOnlyMaster(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	type conn struct {
		ctl string
		n   int
	}
	role := map[conn]ofp13.ControllerRole{}
	total := 0
	for _, e := range p.events {
		switch e.Kind {
		case "role":
			role[conn{e.Ctl, e.Conn}] = e.Role
		case "flow_mod":
			total++
			if role[conn{e.Ctl, e.Conn}] != ofp13.RoleMaster {
				t.Errorf("%s sent a flow mod at %s while the switch had it %s", e.Ctl, e.At.Format("15:04:05.000"), role[conn{e.Ctl, e.Conn}])
			}
		}
	}
	t.Logf("%d flow mods on the wire, each from the switch's master of the moment", total)
}
