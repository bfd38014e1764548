package desired

// A model of table 0 of an OpenFlow 1.3 switch, to evaluate the compiled
// flows without a switch: the highest priority wins, and two matching
// flows of one priority with different actions are a tie the switch may
// break either way. (First written by review, helper-107.)

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// t0Packet is one TCP segment as the switch sees it.
type t0Packet struct {
	inPort   uint32
	src, dst netip.AddrPort
}

func (p t0Packet) String() string {
	return fmt.Sprintf("in_port=%d %s -> %s", p.inPort, p.src, p.dst)
}

// fieldValue is the packet's value of one OXM field, or false when the
// packet has no such field (or the matcher does not know it).
func (p t0Packet) fieldValue(f ofp13.OXMField) ([]byte, bool) {
	is4 := p.src.Addr().Is4()
	switch f {
	case ofp13.FieldInPort:
		return binary.BigEndian.AppendUint32(nil, p.inPort), true
	case ofp13.FieldEthType:
		if is4 {
			return []byte{0x08, 0x00}, true
		}
		return []byte{0x86, 0xdd}, true
	case ofp13.FieldIPProto:
		return []byte{6}, true
	case ofp13.FieldIPv4Src:
		if !is4 {
			return nil, false
		}
		return p.src.Addr().AsSlice(), true
	case ofp13.FieldIPv4Dst:
		if !is4 {
			return nil, false
		}
		return p.dst.Addr().AsSlice(), true
	case ofp13.FieldIPv6Src:
		if is4 {
			return nil, false
		}
		return p.src.Addr().AsSlice(), true
	case ofp13.FieldIPv6Dst:
		if is4 {
			return nil, false
		}
		return p.dst.Addr().AsSlice(), true
	case ofp13.FieldTCPSrc:
		return binary.BigEndian.AppendUint16(nil, p.src.Port()), true
	case ofp13.FieldTCPDst:
		return binary.BigEndian.AppendUint16(nil, p.dst.Port()), true
	}
	return nil, false
}

func t0Matches(m ofp13.Match, p t0Packet) bool {
	for _, o := range m.Fields {
		if o.Class != ofp13.OXMClassOpenFlowBasic {
			return false
		}
		v, ok := p.fieldValue(o.Field)
		if !ok || len(v) != len(o.Value) {
			return false
		}
		for i := range v {
			mask := byte(0xff)
			if o.Mask != nil {
				mask = o.Mask[i]
			}
			if v[i]&mask != o.Value[i]&mask {
				return false
			}
		}
	}
	return true
}

// t0Verdict is what table 0 does with a packet: the actions of the
// winning flow, and every other action string a flow of the same priority
// that also matches would take instead (a tie).
type t0Verdict struct {
	actions string
	reason  string
	ties    []string
}

func t0Lookup(fs []flows.Flow, p t0Packet) t0Verdict {
	var v t0Verdict
	best := -1
	for _, f := range fs {
		if !t0Matches(f.Match, p) {
			continue
		}
		switch {
		case int(f.Priority) > best:
			best = int(f.Priority)
			v = t0Verdict{actions: f.ActionsString(), reason: f.Reason}
		case int(f.Priority) == best && f.ActionsString() != v.actions:
			v.ties = append(v.ties, f.ActionsString()+" ("+f.Reason+")")
		}
	}
	return v
}

func (v t0Verdict) steered() bool { return strings.Contains(v.actions, "set_field") }

// compiledSwitches compiles cfg's switches, as the controller compiles them
// (every agent up).
func compiledSwitches(t *testing.T, src string) map[string][]flows.Flow {
	t.Helper()
	cfg := parse(t, src)
	d, err := Compile(cfg, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]flows.Flow{}
	for _, sw := range d.Controller.Switches {
		fs, err := flows.Compile(sw)
		if err != nil {
			t.Fatalf("compile %s: %v", sw.Name, err)
		}
		out[sw.Name] = fs
	}
	return out
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func t0OutPort(actions string) uint32 {
	i := strings.LastIndex(actions, "output:")
	if i < 0 {
		return 0
	}
	var p uint32
	fmt.Sscanf(actions[i+len("output:"):], "%d", &p)
	return p
}

const twoAgentsPerSite = `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
spread { bits = 4 }
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "a1" {
    node = "na1"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "10.1.0.2"
    interface = "eth1"
  }
  agent "a2" {
    node = "na2"
    switch = "sw-a"
    switch_port = 4
    mac = "02:00:00:00:00:03"
    address = "10.1.0.3"
    interface = "eth1"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "b1" {
    node = "nb1"
    switch = "sw-b"
    switch_port = 7
    mac = "02:00:00:00:00:02"
    address = "10.2.0.2"
    interface = "eth1"
  }
  agent "b2" {
    node = "nb2"
    switch = "sw-b"
    switch_port = 8
    mac = "02:00:00:00:00:04"
    address = "10.2.0.3"
    interface = "eth1"
  }
}
`
